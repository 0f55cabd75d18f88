"""A real (not replayed) training watched by `%memscope` with the dashboard open in chromium: does the browser's
memory stay flat, and how much does each push send?

    python benchmarks/browser_long.py --minutes 30 --out browser_long.json --md browser_long.md   # ~33 min
    python benchmarks/browser_long.py --minutes 3            # a short check (~4.5 min)

--out writes every reading and frame statistic as JSON, --md the printed Markdown report (machine, a table of the
page's metrics at the start, every 5 minutes (every minute under 10), around the reload and at the end, and the
frames' table); --shots DIR keeps screenshots; --no-reload, --reload-at F, --no-gc.

JupyterLab (tests/test_browser.py's helpers: a temporary root, a token, 127.0.0.1) opens a notebook in Debian's
chromium (/usr/bin/chromium, driven by Playwright, headless) and runs `%load_ext memscope` /
`run = %memscope train.py --minutes M` at memscope's default settings. train.py (written into the temporary root)
is a real torch CPU training: a small conv net on synthetic 28x28 images made by a 2-worker DataLoader, one torch
thread, train and eval phases (model.train()/model.eval()), a slow growth (a 64 KiB eval tensor kept per epoch);
it ends by itself after M minutes.

Measured in the page, through a CDP session (Performance.getMetrics after HeapProfiler.collectGarbage): JS heap
used and total, DOM nodes (live ones: attached or detached and not yet collected), event listeners, documents;
at the start (the chart's first points drawn), every minute, just after the reload, and at the end (the run's
verdict card shown). The chart's points are read from the page (the lengths of the Bokeh plot's data sources).

Every websocket frame the page receives is captured (Playwright's `framereceived`; text and binary frames, both
jupyter_server's v1 kernel protocol and the legacy one are decoded) and classified: frames of the chart's widget
comm (the MemoryChart's model id, asked from the kernel, and any comm opened with a `rendered_points` trait),
all comm_msg frames (every widget: chart, status, table, output tail, ...), and everything. Reported: the largest
chart frame and comm_msg frame, the largest per-minute totals (outside the reload's minute and with it), and what
the page received in the 30 s after the reload.

Halfway (``--reload-at 0.5``) the page is saved and reloaded as a person would: the chart must draw again
(points > 0): a reconnecting view gets the window once. The heap after a reload is a new page's, so the report
gives start -> before the reload and after the reload -> end.

Needs the `[test]` extras (playwright, jupyterlab) and chromium. Cleans up on exit, Ctrl-C or SIGTERM: the browser,
JupyterLab's process group, and every process seen under it (the kernel, memscope's run, the training and its
workers), by pid. Not part of run_all.py (no browser there, and it takes M + ~3 minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import test_browser as T  # noqa: E402
from hostinfo import emit, machine_rows, package_version  # noqa: E402

KiB, MiB = 1024, 1024 * 1024

TRAIN = '''"""A small real training for memscope's long browser benchmark (benchmarks/browser_long.py)."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    """28x28 images made on demand in the DataLoader's workers; the label is the sign of a weighted sum."""

    def __init__(self, n, seed):
        self.n, self.seed = n, seed
        self.w = torch.linspace(-1, 1, 28 * 28).reshape(1, 28, 28)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.randn(1, 28, 28, generator=g)
        return x, int((x * self.w).sum() > 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--steps", type=int, default=1500, help="training steps an epoch (~30 s on one core)")
    a = ap.parse_args()
    torch.set_num_threads(1)  # light: the machine runs the browser and JupyterLab too
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 2),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train = DataLoader(Synthetic(64 * a.steps, 1), batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)
    val = DataLoader(Synthetic(64 * 30, 2), batch_size=64, num_workers=0)
    kept = []  # one 64 KiB tensor per epoch: a slow growth
    end, epoch = time.monotonic() + 60 * a.minutes, 0
    while time.monotonic() < end:
        model.train()
        for xb, yb in train:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if time.monotonic() >= end:
                break
        model.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in val:
                correct += int((model(xb).argmax(1) == yb).sum())
        kept.append(torch.zeros(16384))
        print(f"epoch {epoch}: loss {loss.item():.3f} val acc {correct / len(val.dataset):.3f} kept {len(kept)}",
              flush=True)
        epoch += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
'''

CHART_ID_CELL = (
    "from memscope.ui import dashboard as D\nprint('CHART', getattr(getattr(D.last, 'chart', None), 'model_id', None))"
)

# The chart's points as the page holds them: the lengths of the Bokeh plots' data sources (each counted once).
POINTS_JS = """() => {
  const B = window.Bokeh;
  if (!B || !B.index || !document.querySelector('.memscope-chart')) return null;
  const seen = new Set(); let points = 0, plots = 0;
  for (const v of [...B.index]) {
    if (!v.frame || !v.model.x_range) continue;
    plots += 1;
    for (const r of v.model.renderers || []) {
      const ds = r.data_source;
      if (!ds || seen.has(ds)) continue;
      seen.add(ds);
      try { points += ds.get_length() || 0; } catch (e) { /* not a columnar source */ }
    }
  }
  return { plots, points };
}"""
VERDICT_JS = "() => document.querySelectorAll('.memscope-verdict').length"
METRICS = ("JSHeapUsedSize", "JSHeapTotalSize", "Nodes", "JSEventListeners", "Documents", "LayoutObjects")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- websocket frames ------------------------------------------------------------------------------------------


@dataclass
class Frame:
    t: float  # time.monotonic() when Playwright handed it over
    size: int  # bytes on the wire (a text frame: its UTF-8 length)
    binary: bool
    channel: str | None
    msg_type: str | None
    comm_id: str | None
    method: str | None  # a comm_msg's data.method: update, custom, echo_update, ...
    state_keys: tuple[str, ...] = ()  # a comm_open's or update's state keys (to spot charts)


def _json(b: bytes) -> Any:
    try:
        return json.loads(b)
    except ValueError:
        return None


def parse_frame(payload: str | bytes, t: float) -> Frame:
    """What a kernel websocket frame carries: JSON text, a legacy binary message (big-endian uint32 part count and
    offsets; the message's JSON, then its buffers) or jupyter_server's v1 protocol (little-endian uint64 offsets;
    channel, header, parent_header, metadata, content, buffers)."""
    if isinstance(payload, str):
        raw = payload.encode()
        msg, channel, binary = _json(raw), None, False
        header, content = (msg or {}).get("header"), (msg or {}).get("content")
        channel = (msg or {}).get("channel")
    else:
        raw, binary = payload, True
        header = content = channel = None
        n = struct.unpack_from("<Q", raw, 0)[0] if len(raw) >= 8 else 0
        if 3 <= n <= 4096 and 8 * (n + 1) <= len(raw):  # v1
            offs = struct.unpack_from(f"<{n}Q", raw, 8)
            if all(a <= b <= len(raw) for a, b in zip(offs, offs[1:])):
                channel = raw[offs[0] : offs[1]].decode("utf-8", "replace")
                parts = [raw[offs[i] : offs[i + 1]] for i in range(1, n - 1)]
                header = _json(parts[0]) if parts else None
                content = _json(parts[3]) if len(parts) > 3 else None
        if header is None and len(raw) >= 8:  # legacy binary
            nbufs = struct.unpack_from("!I", raw, 0)[0]
            if 1 <= nbufs <= 4096 and 4 * (nbufs + 1) <= len(raw):
                offs = struct.unpack_from(f"!{nbufs}I", raw, 4)
                end = offs[1] if nbufs > 1 else len(raw)
                msg = _json(raw[offs[0] : end])
                if isinstance(msg, dict):
                    header, content, channel = msg.get("header"), msg.get("content"), msg.get("channel")
    header = header if isinstance(header, dict) else {}
    content = content if isinstance(content, dict) else {}
    data = content.get("data") if isinstance(content.get("data"), dict) else {}
    state = data.get("state") if isinstance(data.get("state"), dict) else {}
    return Frame(
        t=t,
        size=len(raw),
        binary=binary,
        channel=channel,
        msg_type=header.get("msg_type"),
        comm_id=content.get("comm_id"),
        method=data.get("method"),
        state_keys=tuple(sorted(state)),
    )


# ---- the page --------------------------------------------------------------------------------------------------


@dataclass
class Reading:
    label: str
    t_s: float  # since the first chart was drawn
    points: int | None
    metrics: dict[str, float]


@dataclass
class Result:
    minutes: float
    t_start: float = 0.0  # monotonic, first chart drawn
    readings: list[Reading] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    chart_ids: set[str] = field(default_factory=set)
    reload_at: float | None = None  # monotonic, the reload's start
    reload_redraw_s: float | None = None  # reload to points > 0
    reload_points: int | None = None
    points_before_reload: int | None = None
    end_at: float | None = None  # monotonic, the verdict card seen
    startup_s: float | None = None  # the cell run to the first chart drawn
    notes: list[str] = field(default_factory=list)


class Page:
    """The notebook's page, its CDP session and its websocket frames."""

    def __init__(self, page: Any, res: Result, gc: bool) -> None:
        self.page, self.res, self.gc = page, res, gc
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Performance.enable")
        page.on("websocket", self._on_ws)

    def _on_ws(self, ws: Any) -> None:
        ws.on("framereceived", lambda payload: self.res.frames.append(parse_frame(payload, time.monotonic())))

    def wait(self, seconds: float) -> None:
        """Idle in Playwright's loop (a time.sleep would hold the frame events back and misdate them)."""
        self.page.wait_for_timeout(max(0, int(seconds * 1000)))

    def points(self) -> int | None:
        p = self.page.evaluate(POINTS_JS)
        return None if p is None else int(p["points"])

    def metrics(self) -> dict[str, float]:
        if self.gc:
            self.cdp.send("HeapProfiler.collectGarbage")
        got = {m["name"]: m["value"] for m in self.cdp.send("Performance.getMetrics")["metrics"]}
        return {k: got[k] for k in METRICS if k in got}

    def read(self, label: str) -> Reading:
        r = Reading(label, round(time.monotonic() - self.res.t_start, 1), self.points(), self.metrics())
        self.res.readings.append(r)
        m = r.metrics
        print(
            f"[{r.t_s:7.1f} s] {label}: heap {m.get('JSHeapUsedSize', 0) / MiB:.1f}/"
            f"{m.get('JSHeapTotalSize', 0) / MiB:.1f} MiB, nodes {m.get('Nodes', 0):.0f}, listeners "
            f"{m.get('JSEventListeners', 0):.0f}, points {r.points}, frames so far {len(self.res.frames)}",
            file=sys.stderr,
            flush=True,
        )
        return r

    def wait_drawn(self, timeout: float) -> int:
        """Wait until the chart holds points; returns them."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            n = self.points()
            if n:
                return n
            self.wait(0.25)
        raise TimeoutError(f"the chart drew no points within {timeout:.0f} s")


def drive(
    url: str, res: Result, minutes: float, reload_at: float | None, gc: bool, shots: str | None, tick: Any
) -> None:
    """Run the cell, read the page every minute, reload it once, wait for the card. ``tick()`` runs every second."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = T._launch(p)
        try:
            raw = browser.new_page(viewport={"width": 1280, "height": 1100})
            pg = Page(raw, res, gc)
            raw.goto(url)
            raw.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            raw.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            t_cell = time.monotonic()
            T.run_cell(raw, 0)
            raw.wait_for_selector(".memscope-chart", timeout=120_000)
            pg.wait_drawn(180)
            res.t_start = time.monotonic()
            res.startup_s = round(res.t_start - t_cell, 2)
            pg.read("start")
            if shots:
                raw.screenshot(path=os.path.join(shots, "browser_long-start.png"))
            T.run_cell(raw, 1)
            m = T.wait_output(raw, 1, r"CHART (\S+)", timeout=60)
            if m.group(1) != "None":
                res.chart_ids.add(m.group(1))
            else:
                res.notes.append("memscope.ui.dashboard.last.chart has no model_id: chart frames found by state keys")

            run_s = 60 * minutes
            next_read = res.t_start + 60
            minute = 0
            deadline = res.t_start + run_s + 600  # the run's own end, then its summary, on a busy machine
            while True:
                now = time.monotonic()
                if raw.evaluate(VERDICT_JS):
                    res.end_at = now
                    break
                if now > deadline:
                    raise TimeoutError(f"no verdict card {run_s + 600:.0f} s after the first chart")
                if reload_at is not None and res.reload_at is None and now - res.t_start >= reload_at * run_s:
                    reload(pg, res, shots)
                    continue
                if now >= next_read:
                    minute += 1
                    pg.read(f"{minute} min")
                    next_read += 60
                tick()
                pg.wait(min(1.0, max(0.05, next_read - time.monotonic())))
            pg.wait(5)  # the final push and the card settle
            pg.read("end")
            if shots:
                T._cell(raw, 0).scroll_into_view_if_needed()
                raw.screenshot(path=os.path.join(shots, "browser_long-end.png"))
        finally:
            try:
                browser.close()
            except Exception as e:  # the driver may already be gone (Ctrl-C reaches it too)
                print(f"browser_long: closing chromium: {e}", file=sys.stderr)


def reload(pg: Page, res: Result, shots: str | None) -> None:
    """Save and reload the page as a person would; the chart must draw again."""
    raw = pg.page
    pg.read("before reload")
    res.points_before_reload = res.readings[-1].points
    raw.keyboard.press("Escape")
    raw.keyboard.press("Control+s")  # the reloaded page finds its widget views in the saved notebook
    raw.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    pg.wait(1)
    res.reload_at = time.monotonic()
    raw.reload()
    raw.wait_for_selector(".memscope-chart", state="attached", timeout=120_000)
    res.reload_points = pg.wait_drawn(120)
    res.reload_redraw_s = round(time.monotonic() - res.reload_at, 2)
    pg.cdp = raw.context.new_cdp_session(raw)  # a fresh session on the new document
    pg.cdp.send("Performance.enable")
    pg.wait(2)
    pg.read("after reload")
    if shots:
        raw.screenshot(path=os.path.join(shots, "browser_long-reloaded.png"))


# ---- the run's processes and their cleanup ---------------------------------------------------------------------


class Tree:
    """Every process seen under JupyterLab (kernel, memscope, training, workers), to end the ones still running
    at the end, by pid and start time: a process JupyterLab's shutdown left behind (re-parented) is still ours."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, float] = {}

    def scan(self) -> None:
        try:
            for c in psutil.Process(self.root).children(recursive=True):
                try:
                    self.seen.setdefault(c.pid, c.create_time())
                except psutil.Error:
                    pass
        except psutil.Error:
            pass

    def alive(self) -> list[psutil.Process]:
        out = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def end(self) -> list[int]:
        """SIGTERM what is left, SIGKILL after 5 s; returns their pids. A run stopped early outlives JupyterLab:
        a kernel that goes does not take the training with it (README)."""
        left = self.alive()
        for p in left:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, still = psutil.wait_procs(left, timeout=5)
        for p in still:
            try:
                p.kill()
            except psutil.Error:
                pass
        return [p.pid for p in left]


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def measure(minutes: float, reload_at: float | None, gc: bool, port: int, shots: str | None, keep: bool) -> Result:
    res = Result(minutes)
    tmp = tempfile.mkdtemp(prefix="memscope-browser-long-")
    root = Path(tmp) / "lab"
    root.mkdir()
    (root / "train.py").write_text(TRAIN)
    cells = [f"%load_ext memscope\nrun = %memscope train.py --minutes {minutes:g}", CHART_ID_CELL]
    proc = tree = None
    try:
        try:
            proc, url = T._serve(Path(tmp), "lab", cells, port)
        except BaseException:  # _serve gives up (pytest.fail) without handing its JupyterLab back
            _end_own_jupyter(port)
            raise
        tree = Tree(proc.pid)
        drive(url, res, minutes, reload_at, gc, shots, tree.scan)
    finally:
        if tree is not None:
            tree.scan()
        if proc is not None:
            T._shutdown(proc)
        if tree is not None:
            left = tree.end()
            if left:
                print(f"browser_long: ended {len(left)} process(es) left after JupyterLab: {left}", file=sys.stderr)
        if keep:
            print(f"browser_long: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return res


def _end_own_jupyter(port: int) -> None:
    """End the JupyterLab this process started on ``port`` (its own process group), if it still runs."""
    for c in psutil.Process().children():
        try:
            if any(a == f"--port={port}" for a in c.cmdline()):
                os.killpg(c.pid, signal.SIGKILL)
        except (psutil.Error, OSError):
            pass


# ---- figures ---------------------------------------------------------------------------------------------------


def chart_ids(res: Result) -> set[str]:
    ids = set(res.chart_ids)
    for f in res.frames:
        if f.msg_type == "comm_open" and f.comm_id and "rendered_points" in f.state_keys:
            ids.add(f.comm_id)
    return ids


def figures(res: Result) -> dict[str, Any]:
    ids = chart_ids(res)
    after_start = [f for f in res.frames if f.t >= res.t_start and (res.end_at is None or f.t <= res.end_at + 5)]

    def in_reload(f: Frame) -> bool:
        return res.reload_at is not None and res.reload_at <= f.t < res.reload_at + 30

    kinds = {
        "chart": lambda f: f.msg_type == "comm_msg" and f.comm_id in ids,
        "comm_msg": lambda f: f.msg_type == "comm_msg",
        "all": lambda f: f is not None,
    }
    reload_minute = None if res.reload_at is None else int((res.reload_at - res.t_start) // 60)
    out: dict[str, Any] = {"chart_comm_ids": sorted(ids)}
    n_min = max(1, math.ceil(((res.end_at or res.t_start) - res.t_start) / 60))
    for name, keep in kinds.items():
        fs = [f for f in after_start if keep(f)]
        steady = [f for f in fs if not in_reload(f)]
        per_min = [0] * n_min
        count_min = [0] * n_min
        for f in fs:
            m = min(int((f.t - res.t_start) // 60), n_min - 1)
            per_min[m] += f.size
            count_min[m] += 1
        # The largest minute among the whole minutes (the last one is partial), outside the reload's minute.
        whole = [i for i in range(n_min) if res.t_start + 60 * (i + 1) <= (res.end_at or 0) + 5] or [0]
        steady_min = [per_min[i] for i in whole if i != reload_minute]
        out[name] = {
            "frames": len(fs),
            "bytes": sum(f.size for f in fs),
            "max_frame": max((f.size for f in steady), default=0),
            "max_frame_with_reload": max((f.size for f in fs), default=0),
            "bytes_per_minute": per_min,
            "frames_per_minute": count_min,
            "max_bytes_per_minute": max(steady_min, default=0),
            "max_bytes_per_minute_with_reload": max(per_min[i] for i in whole),
            "binary_frames": sum(f.binary for f in fs),
            # What the kernel sent, not the echoes of the page's own changes (rendered_points, window_s).
            "pushes_per_minute": [
                sum(1 for f in fs if f.method != "echo_update" and min(int((f.t - res.t_start) // 60), n_min - 1) == i)
                for i in range(n_min)
            ],
            "largest": [
                {"t_s": round(f.t - res.t_start, 1), "bytes": f.size, "method": f.method}
                for f in sorted(fs, key=lambda f: -f.size)[:5]
            ],
        }
        if res.reload_at is not None:
            rf = [f for f in fs if in_reload(f)]
            out[name]["reload_30s"] = {
                "frames": len(rf),
                "bytes": sum(f.size for f in rf),
                "max_frame": max((f.size for f in rf), default=0),
                # The first frame that is not an echo of the page's own change: for the chart, the window, sent once.
                "first_frame": next((f.size for f in rf if f.method != "echo_update"), 0),
            }
    # Before the first chart: the widgets' opening (BokehJS travels there, once per kernel).
    before = [f for f in res.frames if f.t < res.t_start]
    out["before_start"] = {"frames": len(before), "bytes": sum(f.size for f in before)}
    chart = [f for f in after_start if kinds["chart"](f)]
    methods: dict[str, int] = {}
    for f in chart:
        methods[str(f.method)] = methods.get(str(f.method), 0) + 1
    out["chart_methods"] = methods
    return out


def _kib(b: float) -> str:
    return f"{b / KiB:,.1f} KiB"


def report(res: Result, fig: dict[str, Any], machine: list[tuple[str, str]]) -> str:
    step = 5 if res.minutes >= 10 else 1
    rows = []
    for r in res.readings:
        minute = r.label.split()[0]
        if r.label.endswith("min") and minute.isdigit() and int(minute) % step:
            continue
        m = r.metrics
        rows.append(
            f"| {r.label} | {r.t_s / 60:.1f} | {m.get('JSHeapUsedSize', 0) / MiB:.1f} | "
            f"{m.get('JSHeapTotalSize', 0) / MiB:.1f} | {m.get('Nodes', 0):,.0f} | {m.get('JSEventListeners', 0):,.0f} | "
            f"{r.points if r.points is not None else '-'} |"
        )
    c, a, al = fig["chart"], fig["comm_msg"], fig["all"]
    by = {r.label: r for r in res.readings}

    def delta(x: str, y: str, key: str, scale: float = 1.0, unit: str = "") -> str:
        if x not in by or y not in by:
            return "-"
        d = (by[y].metrics.get(key, 0) - by[x].metrics.get(key, 0)) / scale
        return f"{d:+,.1f}{unit}" if scale != 1 else f"{d:+,.0f}"

    def pm(k: dict[str, Any]) -> str:
        return ", ".join(f"{b / KiB:,.0f}" for b in k["bytes_per_minute"])

    lines = [
        f"## The dashboard in chromium over a real {res.minutes:g}-minute training",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine),
        f"| load average at end | {' '.join(f'{x:.2f}' for x in os.getloadavg())} |",
        "",
        "In the page (CDP Performance.getMetrics after a forced GC; points: the Bokeh plot's data sources):",
        "",
        "| when | minute | JS heap used (MiB) | JS heap total (MiB) | DOM nodes | listeners | chart points |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Heap used start -> before reload: {delta('start', 'before reload', 'JSHeapUsedSize', MiB, ' MiB')}, "
        f"nodes {delta('start', 'before reload', 'Nodes')}; after reload -> end: "
        f"{delta('after reload', 'end', 'JSHeapUsedSize', MiB, ' MiB')}, nodes {delta('after reload', 'end', 'Nodes')}"
        f" (start -> end, no reload: {delta('start', 'end', 'JSHeapUsedSize', MiB, ' MiB')})."
        if res.reload_at is not None
        else f"Heap used start -> end: {delta('start', 'end', 'JSHeapUsedSize', MiB, ' MiB')}, nodes "
        f"{delta('start', 'end', 'Nodes')}, listeners {delta('start', 'end', 'JSEventListeners')}.",
        "",
        "Websocket frames the page received, from the first chart to the card (+5 s):",
        "",
        "| frames | count | largest frame | largest minute | bytes per minute (KiB) |",
        "|---|---|---|---|---|",
        f"| the chart's comm (comm_msg to {', '.join(fig['chart_comm_ids']) or '?'}) | {c['frames']:,} | "
        f"{_kib(c['max_frame'])} | {_kib(c['max_bytes_per_minute'])} | {pm(c)} |",
        f"| every comm_msg (all widgets) | {a['frames']:,} | {_kib(a['max_frame'])} | "
        f"{_kib(a['max_bytes_per_minute'])} | {pm(a)} |",
        f"| every frame | {al['frames']:,} | {_kib(al['max_frame'])} | {_kib(al['max_bytes_per_minute'])} | {pm(al)} |",
        "",
        f"Chart pushes a minute (the kernel's messages on the chart's comm, echoes of the page's own changes left "
        f"out): {', '.join(str(n) for n in c['pushes_per_minute'])}.",
        "Largest frame and minute leave out the 30 s after the reload (and its minute); the bytes per minute include "
        f"it. Chart comm messages by method: {fig['chart_methods']}. Before the first chart (the widgets' opening, "
        f"BokehJS once): {fig['before_start']['frames']} frames, {_kib(fig['before_start']['bytes'])}.",
        f"`%memscope` cell run to the first chart point drawn: {res.startup_s} s.",
    ]
    if res.reload_at is not None:
        rc, ra = c["reload_30s"], a["reload_30s"]
        lines += [
            "",
            f"Reload at {(res.reload_at - res.t_start) / 60:.1f} min: the chart drew again "
            f"{res.reload_redraw_s} s after it, {res.reload_points} points (before: {res.points_before_reload}). "
            f"In the 30 s after it the page received: chart comm {rc['frames']} frames, {_kib(rc['bytes'])}, largest "
            f"{_kib(rc['max_frame'])}, the first (not an echo) {_kib(rc['first_frame'])}; every comm_msg {ra['frames']} frames, {_kib(ra['bytes'])}, largest "
            f"{_kib(ra['max_frame'])}.",
        ]
    lines += [f"Note: {n}" for n in res.notes]
    return "\n".join(lines) + "\n"


def _chromium_version() -> str:
    import subprocess

    try:
        return subprocess.run([T.CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="the training's length (30)")
    ap.add_argument("--reload-at", type=float, default=0.5, help="reload the page at this fraction of the run (0.5)")
    ap.add_argument("--no-reload", action="store_true", help="never reload the page")
    ap.add_argument("--no-gc", action="store_true", help="read the metrics without forcing a GC first")
    ap.add_argument("--port", type=int, default=0, help="JupyterLab's port (a free one)")
    ap.add_argument("--out", metavar="FILE", help="write every reading and frame statistic here (JSON)")
    ap.add_argument("--md", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--shots", metavar="DIR", help="save screenshots (start, after the reload, end) here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary JupyterLab root (notebook, record)")
    ns = ap.parse_args(argv)
    if not ns.minutes > 0:
        print("browser_long: --minutes must be > 0", file=sys.stderr)
        return 2
    if not 0 < ns.reload_at < 1:
        print("browser_long: --reload-at must be between 0 and 1", file=sys.stderr)
        return 2
    if not os.path.exists(T.CHROMIUM):
        print(f"browser_long: {T.CHROMIUM} not found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if ns.shots:
        os.makedirs(ns.shots, exist_ok=True)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    machine = machine_rows(
        ("chromium", _chromium_version()),
        ("playwright / jupyterlab", f"{package_version('playwright')} / {package_version('jupyterlab')}"),
    )
    res = measure(
        ns.minutes, None if ns.no_reload else ns.reload_at, not ns.no_gc, ns.port or _free_port(), ns.shots, ns.keep
    )
    fig = figures(res)
    emit(report(res, fig, machine), ns.md)
    if ns.out:
        doc = {
            "minutes": res.minutes,
            "startup_s": res.startup_s,
            "readings": [asdict(r) for r in res.readings],
            "reload": None
            if res.reload_at is None
            else {
                "at_s": round(res.reload_at - res.t_start, 1),
                "redraw_s": res.reload_redraw_s,
                "points": res.reload_points,
                "points_before": res.points_before_reload,
            },
            "end_s": None if res.end_at is None else round(res.end_at - res.t_start, 1),
            "frames": fig,
            "notes": res.notes,
        }
        with open(ns.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
