"""How long Stop takes while another notebook cell is busy, in a real JupyterLab 4 and Notebook 7 (chromium).

    python benchmarks/stop_while_busy.py [--rounds 5] [--apps lab notebook]

Each round re-runs the %memscope cell (a 60 s run of two processes; with --workers, memscope's demo: a torch
training with 2 DataLoader workers, stopped once both run; the re-run also retires the previous dashboard), runs `time.sleep(25)` in the next cell, clicks Stop 1 s later and measures, from the click as the page
saw it: the run's processes gone (psutil, polled every 10 ms) and the verdict card seen showing stopped_by_user
(polled by Playwright, so an upper bound). Then it interrupts the sleep (the kernel's interrupt, as ■) and goes on. Needs Debian's chromium (/usr/bin/chromium) and playwright; reuses tests/test_browser.py's
helpers. Not part of run_all.py (no browser there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import test_browser as T  # noqa: E402

CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 5 {T.TWO}",
    "import time\nwhile not any(l.startswith('pids') for l in run.output_tail): time.sleep(0.1)\n"
    "print('PIDS', *[l for l in run.output_tail if l.startswith('pids')][0].split()[1:])",
    "import time\ntime.sleep(25)\nprint('BUSY DONE')",
]
# --workers: a torch training with 2 DataLoader workers (memscope's demo), stopped once both workers run.
DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "memscope", "demo", "train_demo.py")
WORKER_CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 5 {DEMO} --seconds 90",
    "import time\nalive = lambda: [p for p, d in list(run.snapshot.procs.items()) if d.get('alive', True)]\n"
    "while sum(run.snapshot.procs[p].get('role') == 'dataloader_worker' for p in alive()) < 2: time.sleep(0.1)\n"
    "time.sleep(2)\nprint('PIDS', *alive())",
    CELLS[2],
]


def _gone_at(pids: list[int], timeout: float) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(T._running(p) for p in pids):
            return time.time()
        time.sleep(0.01)
    return float("inf")


def measure(app: str, rounds: int, port: int, cells: list[str] = CELLS) -> list[tuple[float, float]]:
    from playwright.sync_api import sync_playwright

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = T._serve(Path(tmp), app, cells, port)
        try:
            with sync_playwright() as p:
                browser = T._launch(p)
                page = browser.new_page(viewport={"width": 1280, "height": 1100})
                page.goto(url)
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
                time.sleep(3)
                for i in range(rounds):
                    T.run_cell(page, 0)  # a new run; the re-run retires the previous dashboard
                    T.wait_text(page, ".memscope-status", "running", timeout=60_000)
                    pids = T.run_pids(page, 1)
                    stopping_at: list[float] = []
                    T.run_cell(page, 2)
                    time.sleep(1.0)
                    assert all(T._running(p) for p in pids), pids
                    # The click's own time, taken in the page (Playwright's click() returns late on a busy machine);
                    # the processes' end, seen by a poller started before it. Both on the epoch clock.
                    page.evaluate(
                        "() => document.addEventListener('click', () => { window.__clickAt = Date.now(); },"
                        " { capture: true, once: true })"
                    )
                    gone_at: list[float] = []
                    poller = threading.Thread(target=lambda: gone_at.append(_gone_at(pids, 10.0)))
                    poller.start()
                    page.locator(".memscope-btn-stop").last.click()
                    # "stopping…" (a memscope without it shows the verdict first: nothing is recorded then)
                    page.wait_for_selector(".memscope-stopping, .memscope-verdict", timeout=30_000)
                    if page.locator(".memscope-stopping").count():
                        stopping_at.append(time.time())
                    T.wait_text(page, ".memscope-verdict", "stopped_by_user", timeout=30_000)
                    card_at = time.time()
                    poller.join()
                    click_at = page.evaluate("() => window.__clickAt") / 1000
                    gone = gone_at[0] - click_at
                    card = card_at - click_at
                    stopping = f"'stopping…' seen {stopping_at[0] - click_at:.3f} s, " if stopping_at else ""
                    busy = "BUSY DONE" not in T._cell(page, 2).locator(".jp-OutputArea").inner_text()
                    print(
                        f"{app} round {i + 1}: pids {pids}: {stopping}processes gone {gone:.3f} s, card seen "
                        f"{card:.3f} s after the click; sleep still running: {busy}",
                        flush=True,
                    )
                    out.append((gone, card))
                    T.interrupt(page)  # the measurement is done: end the sleep, as ■ does
                    T.wait_output(page, 2, "KeyboardInterrupt", timeout=30)
                browser.close()
        finally:
            T._shutdown(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--apps", nargs="+", default=["lab", "notebook"])
    ap.add_argument("--workers", action="store_true", help="a torch training with 2 DataLoader workers")
    ns = ap.parse_args()
    for k, app in enumerate(ns.apps):
        res = measure(app, ns.rounds, 8911 + k, WORKER_CELLS if ns.workers else CELLS)
        gone = [g for g, _ in res]
        card = [c for _, c in res]
        print(
            f"{app}: Stop while busy, median of {len(res)}: processes gone {statistics.median(gone):.3f} s "
            f"(max {max(gone):.3f}), verdict card {statistics.median(card):.3f} s (max {max(card):.3f})"
        )


if __name__ == "__main__":
    main()
