"""Level 3: a real JupyterLab in Debian's Chromium, driven by Playwright. %memscope from a notebook; the chart's
point count grows; a page reload still shows the whole history; Stop, clicked while another cell is busy, says
"queued" at once and then the verdict card appears. Saves a screenshot."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import script

CHROMIUM = "/usr/bin/chromium"
pytest.importorskip("jupyterlab")
playwright = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

PORT, TOKEN = 8897, "memscope-test"
CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 {script('grow.py')}",
    "import time\nfrom memscope.ui import dashboard as D\nfrom memscope.ui.chart import count_points\n"
    "time.sleep(1.5)\nprint('POINTS', D.last.chart.rendered_points, count_points(D.last.chart.data))",
    "time.sleep(6)\nprint('BUSY DONE')",
    "print('CAUSE', run.wait(30)['exit']['cause'])",
]


def _cell(page, i):
    return page.locator(".jp-Notebook .jp-Cell").nth(i)


def run_cell(page, i):
    cell = _cell(page, i)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for _ in range(5):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")
        page.keyboard.press("Shift+Enter")
        deadline = time.time() + 5
        while time.time() < deadline:
            now = prompt.inner_text()
            if now != before and now.strip() not in ("[ ]:", ""):
                return
            time.sleep(0.2)
    raise AssertionError(f"cell {i} did not start")


def wait_output(page, i, pattern, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, _cell(page, i).locator(".jp-OutputArea").inner_text())
        if m:
            return m
        time.sleep(0.25)
    raise AssertionError(f"cell {i}: {pattern!r} never appeared")


def wait_text(page, selector, *texts, timeout=30_000):
    """Wait until an element matching ``selector`` contains every one of ``texts``."""
    cond = " && ".join(f"e.textContent.includes({t!r})" for t in texts)
    page.wait_for_function(f"() => [...document.querySelectorAll({selector!r})].some(e => {cond})", timeout=timeout)


def points(page):
    run_cell(page, 1)
    m = wait_output(page, 1, r"POINTS (\d+) (\d+)")
    return int(m.group(1)), int(m.group(2))


def _serve(tmp_path, app, cells, port):
    """Start `jupyter lab` or `jupyter notebook` (Notebook 7) on 127.0.0.1 with a token over a one-notebook root."""
    root = tmp_path / app
    root.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                     "source": src} for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "run.ipynb").write_text(json.dumps(nb))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".cfg"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", f"--LabApp.workspaces_dir={root / '.ws'}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=open(tmp_path / f"{app}.log", "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2)
            break
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"jupyter {app} did not start: " + (tmp_path / f"{app}.log").read_text()[-2000:])
            time.sleep(0.5)
    path = "lab/tree" if app == "lab" else "notebooks"
    return proc, f"http://127.0.0.1:{port}/{path}/run.ipynb?token={TOKEN}"


def _shutdown(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def lab(tmp_path):
    proc, url = _serve(tmp_path, "lab", CELLS, PORT)
    yield url
    _shutdown(proc)


def _launch(p):
    return p.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"])


def test_dashboard_in_a_real_browser(lab, tmp_path):
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    with playwright.sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(lab)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        run_cell(page, 0)
        page.wait_for_selector(".memscope-chart", timeout=60_000)
        page.wait_for_selector(".memscope-btn-stop", timeout=60_000)
        first, _ = points(page)
        time.sleep(2)
        second, expected = points(page)
        # It grows; the browser lags the kernel by at most the push in flight (4 pushes a second).
        assert 0 < first < second <= expected
        _cell(page, 0).scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(shots, "dashboard-live.png"))

        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")  # the reloaded page reads the notebook (its widget views) from disk
        page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
        time.sleep(1)
        page.reload()  # the page forgets; the widget state in the kernel does not
        page.wait_for_selector(".memscope-chart", state="attached", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        time.sleep(2)
        after, expected = points(page)
        # The full history, not only what came after the reload: at least what was drawn before it.
        assert second <= after <= expected

        run_cell(page, 2)  # the kernel is busy for 6 s
        time.sleep(0.5)
        stop = page.locator(".memscope-btn-stop").first
        stop.click()
        assert stop.inner_text() == "stopping…"  # at once, in the browser
        wait_text(page, ".memscope-controls-note", "queued", timeout=5_000)
        wait_output(page, 2, "BUSY DONE", timeout=30)
        wait_text(page, ".memscope-verdict", "stopped_by_user")
        run_cell(page, 3)
        wait_output(page, 3, "CAUSE stopped_by_user")
        _cell(page, 0).scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(shots, "dashboard-stopped.png"))
        browser.close()


NB7_CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 {script('attention_leak.py')} 60",
    "import time\nwhile not any('step 50' in line for line in run.output_tail): time.sleep(0.2)\nprint('STEPPING')",
    "print('CAUSE', run.wait(30)['exit']['cause'])",
]


def test_dashboard_in_notebook_7(tmp_path):
    """Notebook 7 (the classic interface rebuilt on JupyterLab 4): the dashboard renders, the chart draws, the
    Tensor census button fills the census panel, and Stop ends with the verdict card."""
    pytest.importorskip("notebook")
    proc, url = _serve(tmp_path, "notebook", NB7_CELLS, PORT + 1)
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    try:
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(url)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            time.sleep(3)  # the kernel connects
            run_cell(page, 0)
            page.wait_for_selector(".memscope-chart", timeout=90_000)
            # BokehJS loaded and drew: the chart's "loading…" line is gone (the plot itself is in a shadow root).
            page.wait_for_function("() => { const s = document.querySelector('.memscope-chart-status');"
                                   " return s !== null && s.style.display === 'none'; }", timeout=60_000)
            run_cell(page, 1)
            wait_output(page, 1, "STEPPING", timeout=90)  # the script trains: torch imported, maps stored
            census = page.locator(".memscope-btn-census").first
            census.click()
            wait_text(page, ".memscope-census", "Tensor census of pid", timeout=60_000)
            time.sleep(3)  # the script stores more attention maps, with their graphs
            census.click()
            wait_text(page, ".memscope-census", "since the census at", "(8,4,48,48)", ".detach()", timeout=60_000)
            page.locator(".memscope-btn-stop").first.click()
            wait_text(page, ".memscope-verdict", "stopped_by_user", timeout=60_000)
            run_cell(page, 2)
            wait_output(page, 2, "CAUSE stopped_by_user")
            _cell(page, 0).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "notebook7.png"))
            browser.close()
    finally:
        _shutdown(proc)
