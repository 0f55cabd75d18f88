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


def points(page):
    run_cell(page, 1)
    m = wait_output(page, 1, r"POINTS (\d+) (\d+)")
    return int(m.group(1)), int(m.group(2))


@pytest.fixture
def lab(tmp_path):
    root = tmp_path / "lab"
    root.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                     "source": src} for i, src in enumerate(CELLS)],
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "run.ipynb").write_text(json.dumps(nb))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".cfg"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={PORT}",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}",
         "--LabApp.news_url=", f"--LabApp.workspaces_dir={root / '.ws'}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=open(tmp_path / "lab.log", "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/api/status?token={TOKEN}", timeout=2)
            break
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail("jupyter lab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
            time.sleep(0.5)
    yield f"http://127.0.0.1:{PORT}/lab/tree/run.ipynb?token={TOKEN}"
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def test_dashboard_in_a_real_browser(lab, tmp_path):
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
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
        page.wait_for_function("() => [...document.querySelectorAll('.memscope-controls-note')]"
                               ".some(e => e.textContent.includes('queued'))", timeout=5_000)
        wait_output(page, 2, "BUSY DONE", timeout=30)
        page.wait_for_function("() => [...document.querySelectorAll('.memscope-verdict')]"
                               ".some(e => e.textContent.includes('stopped_by_user'))", timeout=30_000)
        run_cell(page, 3)
        wait_output(page, 3, "CAUSE stopped_by_user")
        _cell(page, 0).scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(shots, "dashboard-stopped.png"))
        browser.close()
