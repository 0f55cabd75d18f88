"""Level 3: a real JupyterLab and Notebook 7 in Debian's Chromium, driven by Playwright. %memscope from a notebook;
the chart's point count grows; a page reload still shows the whole history; Stop, clicked while another cell
sleeps, ends the run's processes within 2 s and the verdict card appears before the sleep ends; re-running the cell
leaves a slider of another cell alive; without comm subshells the click says "queued" and how to stop now.
Saves screenshots (MEMSCOPE_SCREENSHOTS=dir keeps them)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from conftest import script

CHROMIUM = "/usr/bin/chromium"
pytest.importorskip("jupyterlab")
playwright = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

PORT, TOKEN = 8897, "memscope-test"
TWO = f"{script('two_procs.py')} 60"  # a 60 s run of two processes
CELLS = [
    "import ipywidgets\nipywidgets.IntSlider(value=7, description='keep-me')",
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 {TWO}",
    "import time\nfrom memscope.ui import dashboard as D\nfrom memscope.ui.chart import count_points\n"
    "time.sleep(1.5)\nprint('POINTS', D.last.chart.rendered_points, count_points(D.last.chart.data))",
    "while not any(l.startswith('pids') for l in run.output_tail): time.sleep(0.1)\n"
    "print('PIDS', *[l for l in run.output_tail if l.startswith('pids')][0].split()[1:])",
    "time.sleep(25)\nprint('BUSY DONE')",
    "print('CAUSE', run.wait(30)['exit']['cause'])",
]


def _cell(page, i):
    return page.locator(".jp-Notebook .jp-Cell").nth(i)


def _dismiss_dialog(page):
    """A JupyterLab dialog (e.g. a kernel chooser after a slow start) blocks every click: accept it, say which."""
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and dialog.first.is_visible():
        print("dialog:", dialog.first.inner_text()[:300].replace("\n", " | "), file=sys.stderr)
        dialog.first.locator(".jp-mod-accept").first.click()
        time.sleep(0.5)


def run_cell(page, i):
    cell = _cell(page, i)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for _ in range(5):
        _dismiss_dialog(page)
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


def points(page, i=2):
    run_cell(page, i)
    m = wait_output(page, i, r"POINTS (\d+) (\d+)")
    return int(m.group(1)), int(m.group(2))


def run_pids(page, i):
    run_cell(page, i)
    return [int(x) for x in wait_output(page, i, r"PIDS ([\d ]+)").group(1).split()]


def _running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_after(pids, timeout, since=None):
    """Seconds from ``since`` (a time.monotonic(); default now) until none of ``pids`` runs (a zombie counts as
    gone), or None if some still runs ``timeout`` s after ``since``. Only looks."""
    t0 = time.monotonic() if since is None else since
    while time.monotonic() - t0 < timeout:
        if not any(_running(p) for p in pids):
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def interrupt(page):
    """Interrupt the page's kernel as the ■ button does (POST /api/kernels/<id>/interrupt)."""
    base = re.match(r"https?://[^/]+", page.url).group(0) + "/api/kernels"
    auth = {"Authorization": f"token {TOKEN}"}
    with urllib.request.urlopen(urllib.request.Request(base, headers=auth), timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        urllib.request.urlopen(
            urllib.request.Request(f"{base}/{k['id']}/interrupt", data=b"", method="POST", headers=auth), timeout=10
        ).close()


def stop_while_busy(page, pids, busy, cause_cell, shots, name):
    """Run the 25 s sleep in cell ``busy``, click Stop: the run's processes must be gone within 2 s and the
    verdict card say stopped_by_user before the sleep ends; then interrupt the sleep. Returns the seconds from
    the click to the processes gone."""
    run_cell(page, busy)
    time.sleep(1.0)
    stop = page.locator(".memscope-btn-stop").last
    t0 = time.monotonic()
    assert all(_running(p) for p in pids)
    stop.click()
    latency = gone_after(pids, 2.0, since=t0)
    assert latency is not None, "the run's processes outlived the Stop click by 2 s"
    wait_text(page, ".memscope-verdict", "stopped_by_user", timeout=15_000)
    assert "BUSY DONE" not in _cell(page, busy).locator(".jp-OutputArea").inner_text()
    assert time.monotonic() - t0 < 20  # the 25 s sleep is still running
    page.screenshot(path=os.path.join(shots, name))
    # What the buttons said no longer applies once the run has ended: the note clears.
    page.wait_for_function(
        "() => [...document.querySelectorAll('.memscope-controls-note')].pop().textContent === ''", timeout=5_000
    )
    interrupt(page)  # no need to wait out the sleep
    wait_output(page, busy, "KeyboardInterrupt", timeout=30)
    run_cell(page, cause_cell)
    wait_output(page, cause_cell, "CAUSE stopped_by_user")
    return latency


def _serve(tmp_path, app, cells, port):
    """Start `jupyter lab` or `jupyter notebook` (Notebook 7) on 127.0.0.1 with a token over a one-notebook root."""
    root = tmp_path / app
    root.mkdir(exist_ok=True)
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / "run.ipynb").write_text(json.dumps(nb))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".cfg"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            app,
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
            f"--LabApp.workspaces_dir={root / '.ws'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=open(tmp_path / f"{app}.log", "w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
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


def open_notebook(browser, url, width, height=1000):
    """A page on the notebook, its cells drawn and its kernel idle."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    # Attached: at 800 px the notebook's toolbar folds the indicator into its "more" menu.
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", state="attached", timeout=120_000)
    return page


def _launch(p):
    return p.chromium.launch(
        executable_path=CHROMIUM,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )


def test_dashboard_in_a_real_browser(lab, tmp_path):
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    with playwright.sync_playwright() as p:
        browser = _launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(lab)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        run_cell(page, 0)  # a user's slider, in a cell of its own
        page.wait_for_selector(".widget-slider", timeout=60_000)
        run_cell(page, 1)
        page.wait_for_selector(".memscope-chart", timeout=60_000)
        page.wait_for_selector(".memscope-btn-stop", timeout=60_000)
        first, _ = points(page)
        time.sleep(2)
        second, expected = points(page)
        # It grows; the browser lags the kernel by at most the push in flight (4 pushes a second).
        assert 0 < first < second <= expected
        _cell(page, 1).scroll_into_view_if_needed()
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

        pids = run_pids(page, 3)
        assert len(pids) == 2
        stop_while_busy(page, pids, 4, 5, shots, "dashboard-stopped-while-busy.png")

        # Re-running the %memscope cell replaces its dashboard and nothing else: the slider lives on.
        run_cell(page, 1)
        wait_text(page, ".memscope-status", "running", timeout=60_000)
        run_cell(page, 5)  # waits for the new run; Stop it meanwhile
        page.locator(".memscope-btn-stop").last.click()
        wait_output(page, 5, "CAUSE stopped_by_user", timeout=60)
        assert page.locator(".memscope-controls").count() == 1
        assert page.locator(".widget-slider").count() == 1
        body = page.locator("body").inner_text()
        assert "Error displaying widget" not in body and "model not found" not in body
        _cell(page, 1).scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(shots, "dashboard-rerun.png"))
        browser.close()


NB7_CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 {TWO}",
    "import time\nwhile not any(l.startswith('pids') for l in run.output_tail): time.sleep(0.1)\n"
    "print('PIDS', *[l for l in run.output_tail if l.startswith('pids')][0].split()[1:])",
    "time.sleep(25)\nprint('BUSY DONE')",
    "print('CAUSE', run.wait(30)['exit']['cause'])",
    f"run = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 {script('attention_leak.py')} 60",
    "while not any('step 50' in line for line in run.output_tail): time.sleep(0.2)\nprint('STEPPING')",
    "print('CAUSE', run.wait(30)['exit']['cause'])",
]


def test_dashboard_in_notebook_7(tmp_path):
    """Notebook 7 (the classic interface rebuilt on JupyterLab 4): the dashboard renders, the chart draws, Stop
    acts while another cell sleeps, the Tensor census button fills the census panel, and Stop ends with the
    verdict card."""
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
            t_start = time.monotonic()
            run_cell(page, 0)
            page.wait_for_selector(".memscope-chart", timeout=90_000)
            # BokehJS loaded and drew: the chart's "loading…" line is gone (the plot itself is in a shadow root).
            page.wait_for_function(
                "() => { const s = document.querySelector('.memscope-chart-status');"
                " return s !== null && s.style.display === 'none'; }",
                timeout=60_000,
            )
            pids = run_pids(page, 1)
            time.sleep(max(0.0, 5.0 - (time.monotonic() - t_start)))  # the click lands ~6 s into the run
            stop_while_busy(page, pids, 2, 3, shots, "notebook7-stopped-while-busy.png")

            run_cell(page, 4)
            page.wait_for_selector(".memscope-btn-census >> nth=1", timeout=90_000)
            run_cell(page, 5)
            wait_output(page, 5, "STEPPING", timeout=90)  # the script trains: torch imported, maps stored
            census = page.locator(".memscope-btn-census").last
            census.click()
            wait_text(page, ".memscope-census", "Tensor census of pid", timeout=60_000)
            time.sleep(3)  # the script stores more attention maps, with their graphs
            census.click()
            wait_text(page, ".memscope-census", "since the census at", "(8,4,48,48)", ".detach()", timeout=60_000)
            # The census panel sits below its chart (above, it pushed the chart off screen).
            below = page.evaluate(
                "() => { const c = [...document.querySelectorAll('.memscope-chart')].pop().getBoundingClientRect();"
                " const s = [...document.querySelectorAll('.memscope-census')].pop().getBoundingClientRect();"
                " return s.top - c.bottom; }"
            )
            assert below >= -1, below
            page.set_viewport_size({"width": 800, "height": 1100})  # Notebook 7 at 800 px: the plot keeps the width
            page.wait_for_function(
                f"() => {{ const c = ({CHART_JS})(); return c && c.plot >= 0.75 * c.chart && c.reset; }}",
                timeout=10_000,
            )
            page.set_viewport_size({"width": 1280, "height": 1100})
            page.locator(".memscope-btn-stop").last.click()
            page.wait_for_function(
                "() => { const v = [...document.querySelectorAll('.memscope-verdict')];"
                " return v.length === 2 && v.every(e => e.textContent.includes('stopped_by_user'));"
                " }",
                timeout=60_000,
            )
            run_cell(page, 6)
            wait_output(page, 6, "CAUSE stopped_by_user")
            _cell(page, 4).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "notebook7.png"))
            browser.close()
    finally:
        _shutdown(proc)


NARROW_JS = """() => {
  const out = document.querySelector('.memscope-controls').closest('.jp-OutputArea-output');
  const right = out.getBoundingClientRect().right + 1;
  const clipped = [...out.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > right)
                                                .map(e => e.tagName + '.' + e.className).slice(0, 10);
  const frames = [...window.Bokeh.index].filter(v => v.frame).map(v => v.frame.bbox.width);
  return { notebook: document.querySelector('.jp-NotebookPanel').getBoundingClientRect().width, clipped,
           cmd_titles: [...out.querySelectorAll('td.memscope-cmd')].filter(td => td.title.includes('python')).length,
           chart: out.querySelector('.memscope-chart').getBoundingClientRect().width, plot: Math.min(...frames) };
}"""


FALLBACK_CELLS = [
    f"%load_ext memscope\nrun = %memscope --interval 0.2 --grace 1 {TWO}",
    "import time\nwhile not any(l.startswith('pids') for l in run.output_tail): time.sleep(0.1)\n"
    "print('PIDS', *[l for l in run.output_tail if l.startswith('pids')][0].split()[1:])",
    "import time\ntime.sleep(25)\nprint('BUSY DONE')",
    "from memscope.ui import dashboard as D\n"
    "print('CAUSE', run.wait(30)['exit']['cause'], 'CLICKS', D.last.controls.ack)",
]


def test_stop_without_subshells_says_queued_and_how_to_stop_now(tmp_path):
    """A frontend that sends no comm over subshells (Colab, VS Code; here JupyterLab with commsOverSubshells
    "disabled"): the click says within a second that Stop is queued and that interrupting the busy cell stops
    now; interrupting it (■) then stops the run at once."""
    settings = tmp_path / "lab" / ".cfg" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "kernels-settings.jupyterlab-settings").write_text(json.dumps({"commsOverSubshells": "disabled"}))
    proc, url = _serve(tmp_path, "lab", FALLBACK_CELLS, PORT + 2)
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    try:
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            # 1060 px with the file browser open: the notebook is narrower than 800 px.
            page = open_notebook(browser, url, 1060)
            run_cell(page, 0)
            page.wait_for_selector(".memscope-btn-stop", timeout=60_000)
            pids = run_pids(page, 1)
            narrow = page.evaluate(NARROW_JS)
            assert narrow["notebook"] <= 800, narrow
            assert narrow["clipped"] == [], narrow  # nothing sticks out of the output area
            assert narrow["cmd_titles"] == 2, narrow  # the command column's cells carry the full command
            assert narrow["plot"] >= 0.6 * narrow["chart"], narrow  # the legend leaves the plot >= 60 %
            page.screenshot(path=os.path.join(shots, "narrow.png"))
            run_cell(page, 2)
            time.sleep(1.0)
            stop = page.locator(".memscope-btn-stop")
            stop.click()
            assert stop.inner_text() in ("Stop: sent…", "Stop: queued")  # at once, in the browser
            wait_text(page, ".memscope-controls-note", "Stop is queued", "interrupt that cell (■)", timeout=1_500)
            assert stop.inner_text() == "Stop: queued"
            stop.click()  # a second click while the first is pending sends nothing more
            assert gone_after(pids, 1.0) is None  # it really waits
            page.screenshot(path=os.path.join(shots, "queued.png"))
            t0 = time.monotonic()
            interrupt(page)  # as ■ does
            assert gone_after(pids, 5.0) is not None, "the queued Stop did not run after the interrupt"
            wait_text(page, ".memscope-verdict", "stopped_by_user", timeout=15_000)
            assert time.monotonic() - t0 < 10
            note = page.locator(".memscope-controls-note").inner_text()
            assert "queued" not in note, note  # what no longer applies is gone
            run_cell(page, 3)
            wait_output(page, 3, "CAUSE stopped_by_user CLICKS 1")  # two clicks, one request
            browser.close()
    finally:
        _shutdown(proc)


def test_live_leak_verdict_before_the_run_ends(tmp_path):
    """Issue 12's bar in a real JupyterLab: %memscope of a script that keeps 1.5 MiB per 0.1 s under 250 MiB
    spikes, with memscope's default intervals; the status line says the memory grows while the run still runs,
    and the live fast series holds the spikes."""
    cells = [
        f"%load_ext memscope\nrun = %memscope {script('leak_spikes.py')} --seconds 60",
        "print('CAUSE', run.wait(90)['exit']['cause'])",
    ]
    proc, url = _serve(tmp_path, "lab", cells, PORT + 7)
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    try:
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = open_notebook(browser, url, 1280)
            run_cell(page, 0)
            page.wait_for_selector(".memscope-status", timeout=60_000)
            # Not yet: the line says what it still needs.
            wait_text(page, ".memscope-status", "running", "not yet known", "a verdict needs 20 s", timeout=60_000)
            # Then the verdict, while the run is still running (it lasts 60 s).
            wait_text(page, ".memscope-status", "running", "Leak in the main process", timeout=75_000)
            status = page.locator(".memscope-status").first.inner_text()
            m = re.search(r"● running (\d+):(\d+):(\d+)", status)
            assert m and int(m.group(2)) * 60 + int(m.group(3)) < 60, status
            _cell(page, 0).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "live-leak-verdict.png"))
            page.locator(".memscope-btn-stop").first.click()
            run_cell(page, 1)
            wait_output(page, 1, "CAUSE stopped_by_user", timeout=90)
            browser.close()
    finally:
        _shutdown(proc)


CHART_JS = """() => {
  const v = window.Bokeh && [...window.Bokeh.index].filter(v => v.frame && v.model.x_range)[0];
  if (!v || !document.querySelector('.memscope-chart-bar')) return null;
  const canvas = v.canvas_view.el.getBoundingClientRect(), f = v.frame.bbox;
  const labels = v.model.center.filter(r => r.constructor.__name__ === 'LabelSet')[0].source.data;
  const bar = document.querySelector('.memscope-chart-bar');
  // The reset button, wherever Bokeh's shadow roots put it: drawn, and inside the output area.
  const find = (root) => { for (const e of root.querySelectorAll('*')) {
      if ((e.className || '').toString().includes('reset')) return e;
      if (e.shadowRoot) { const r = find(e.shadowRoot); if (r) return r; } } return null; };
  const reset = find(v.el.shadowRoot || v.el) || find(document);
  const out = document.querySelector('.memscope-chart').closest('.jp-OutputArea-output');
  const o = out.getBoundingClientRect(), r = reset ? reset.getBoundingClientRect() : null;
  const chart = document.querySelector('.memscope-chart').getBoundingClientRect();
  const census = document.querySelector('.memscope-census');
  const rc = r ? { x: r.left + r.width / 2, y: r.top + r.height / 2 } : null;
  return { reset_at: rc, start: v.model.x_range.start, end: v.model.x_range.end, following: bar.dataset.following,
           note: bar.textContent, cx: canvas.left + f.left + f.width / 2, cy: canvas.top + f.top + f.height / 2,
           plot: f.width, chart: chart.width, out: o.width, chart_bottom: chart.bottom,
           census_top: census ? census.getBoundingClientRect().top : null,
           notebook: document.querySelector('.jp-NotebookPanel').getBoundingClientRect().width,
           reset: r && r.width > 0 && r.left >= o.left - 1 && r.right <= o.right + 1,
           label_x: labels.x.map(x => v.frame.x_scale.compute(x)), labels: labels.text,
           axis: v.model.below[0].axis_label,
           bands: v.model.renderers.filter(r => r.glyph && r.glyph.constructor.__name__ === 'VStrip')
             .map(r => r.data_source.data.x0.map((x, i) => v.frame.x_scale.compute(r.data_source.data.x1[i])
                                                        - v.frame.x_scale.compute(x))),
           boxes: v.model.center.filter(r => r.constructor.__name__ === 'BoxAnnotation').length,
           scroll: document.querySelector('.jp-WindowedPanel-outer').scrollTop };
}"""


def test_chart_follows_fits_800_px_and_leaves_a_static_copy(tmp_path):
    """Issue 23, points 1, 7 and 3, in JupyterLab at 800 px with the file browser open: the chart keeps most of the
    width, its toolbar shows, phase labels do not run together (eval phases labelled too), a census goes below the
    chart; after a click in the chart the wheel still scrolls the page and the chart follows the run; a pan pauses
    it ("paused at …"), "follow live" resumes; the saved notebook reopened without the run's kernel shows the
    static copy of the final dashboard, not "model not found"."""
    cells = [
        f"%load_ext memscope\nrun = %memscope --interval 0.1 --pss-interval 0.5 --grace 1 "
        f"{script('phases_leak.py')} --seconds 120",
        "from memscope.ui import dashboard as D\nprint('WINDOW', D.last.chart.window_s)",
    ]
    proc, url = _serve(tmp_path, "lab", cells, PORT + 9)
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    try:
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = open_notebook(browser, url, 800, 900)
            run_cell(page, 0)
            page.wait_for_selector(".memscope-chart-bar", timeout=90_000)
            page.wait_for_selector(".memscope-btn-census", timeout=90_000)
            # Some epochs: train, then an eval phase of a third of its length.
            page.wait_for_function(
                f"() => {{ const c = ({CHART_JS})(); return c && c.labels.includes('eval') && c.end > 12; }}",
                timeout=90_000,
            )
            c = page.evaluate(CHART_JS)
            assert c["notebook"] <= 560, c  # the side panel is open
            assert c["chart"] >= 0.95 * c["out"] and c["plot"] >= 0.75 * c["chart"], c  # the plot keeps the width
            assert c["reset"], c  # the toolbar's Reset is there, drawn inside the output area
            assert "eval" in c["labels"], c  # the short phases are labelled too
            # The bands: one VStrip (no DOM node a band: a BoxAnnotation each was 9, thousands in a long run),
            # each at least 3 px wide.
            assert len(c["bands"]) == 1 and len(c["bands"][0]) >= 4 and c["boxes"] == 0, c
            assert min(c["bands"][0]) >= 2.9, c
            xs = sorted(zip(c["label_x"], c["labels"]))
            for (x0, t0), (x1, _) in zip(xs, xs[1:]):
                assert x1 - x0 >= 4 * len(t0), c  # labels do not run together
            assert "min" not in c["axis"] and not re.search(r"\d\.\d{3}", c["axis"]), c

            page.locator(".memscope-btn-census").click()
            wait_text(page, ".memscope-census", "Tensor census of pid", timeout=60_000)
            c = page.evaluate(CHART_JS)
            assert c["census_top"] >= c["chart_bottom"] - 1, c  # below the chart, not pushing it away

            # A click in the plot (as on its legend), then the wheel: the page scrolls, the chart keeps following.
            _cell(page, 0).locator(".memscope-chart").scroll_into_view_if_needed()
            c = page.evaluate(CHART_JS)
            page.mouse.click(c["cx"], c["cy"])
            before = page.evaluate(CHART_JS)
            page.mouse.wheel(0, 200)
            time.sleep(1.0)
            after = page.evaluate(CHART_JS)
            assert after["scroll"] > before["scroll"], (before, after)
            time.sleep(2.0)
            later = page.evaluate(CHART_JS)
            assert later["following"] == "true" and later["end"] > after["end"], (after, later)

            # A pan pauses it, and says so; "follow live" brings it back.
            _cell(page, 0).locator(".memscope-chart").scroll_into_view_if_needed()
            c = page.evaluate(CHART_JS)
            page.mouse.move(c["cx"], c["cy"])
            page.mouse.down()
            page.mouse.move(c["cx"] + 120, c["cy"], steps=8)
            page.mouse.up()
            paused = page.evaluate(CHART_JS)
            assert paused["following"] == "false" and "paused at" in paused["note"], paused
            time.sleep(2.0)
            assert page.evaluate(CHART_JS)["end"] == paused["end"]  # it stays where the person put it
            page.locator(".memscope-chart-follow-btn").click()
            time.sleep(2.0)
            resumed = page.evaluate(CHART_JS)
            assert resumed["following"] == "true" and resumed["end"] > paused["end"], resumed
            page.mouse.move(c["cx"], c["cy"])  # paused again; the toolbar's Reset resumes too
            page.mouse.down()
            page.mouse.move(c["cx"] + 120, c["cy"], steps=8)
            page.mouse.up()
            assert page.evaluate(CHART_JS)["following"] == "false"
            reset = page.evaluate(CHART_JS)["reset_at"]
            page.mouse.click(reset["x"], reset["y"])
            page.wait_for_function(f"() => ({CHART_JS})().following === 'true'", timeout=5_000)
            page.select_option(".memscope-chart-window", "60")  # "last 1 min": the person's choice reaches the kernel
            page.screenshot(path=os.path.join(shots, "chart-800px.png"))
            run_cell(page, 1)
            wait_output(page, 1, "WINDOW 60")

            # Stopped; saved; reopened with a new kernel: the static copy of the final dashboard shows.
            page.locator(".memscope-btn-stop").click()
            wait_text(page, ".memscope-verdict", "stopped_by_user", timeout=30_000)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.memscope-static')].some(e =>"
                " e.textContent.includes('stopped_by_user') && e.getBoundingClientRect().height === 0)",
                timeout=30_000,
            )
            page.keyboard.press("Escape")
            page.keyboard.press("Control+s")
            page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
            time.sleep(1)
            base = re.match(r"https?://[^/]+", page.url).group(0) + "/api/kernels"
            auth = {"Authorization": f"token {TOKEN}"}
            with urllib.request.urlopen(urllib.request.Request(base, headers=auth), timeout=10) as r:
                for k in json.load(r):
                    req = urllib.request.Request(f"{base}/{k['id']}", method="DELETE", headers=auth)
                    urllib.request.urlopen(req, timeout=30).close()
            page.reload()
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            _dismiss_dialog(page)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.memscope-static')].some(e =>"
                " e.textContent.includes('stopped_by_user') && e.getBoundingClientRect().height > 100)",
                timeout=60_000,
            )
            time.sleep(3)  # the widget manager gives up on the old models
            shown = [e for e in page.locator(".jp-OutputArea-child").all() if e.is_visible()]
            text = " ".join(e.inner_text() for e in shown)
            assert "model not found" not in text and "Error displaying widget" not in text, text
            _cell(page, 0).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "static-copy.png"))
            browser.close()
    finally:
        _shutdown(proc)


FIT_JS = """() => {
  const vs = window.Bokeh && [...window.Bokeh.index].filter(v => v.model && v.model.title && v.model.title.text
      && v.model.title.text.includes('will size 160 fit?'));
  if (!vs || !vs.length) return null;
  return vs[0].model.renderers.map(r => r.data_source.data.x.length);
}"""


def test_fit_view_draws_and_updates_while_the_kernel_is_free(tmp_path):
    """Issue 31's bar: `%memscope fit` draws its chart (BokehJS carried by memscope's loader widget) and the probes
    appear on it one by one while another cell runs."""
    cells = [
        f"%load_ext memscope\nf = %memscope fit --sizes 20,40,80 --target 160 --for 2 -- {script('fit_alloc.py')} {{}} 30",
        "import time\nfor _ in range(40):\n    time.sleep(0.5)\nprint('BUSY DONE', len(f.points))",
        "r = f.wait(120)\nprint('FITS', r['fits'], len(r['runs']))",
    ]
    proc, url = _serve(tmp_path, "lab", cells, PORT + 9)
    shots = os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))
    try:
        with playwright.sync_playwright() as p:
            browser = _launch(p)
            page = open_notebook(browser, url, 1280)
            run_cell(page, 0)
            run_cell(page, 1)  # the kernel is free: this runs while the probes go
            seen = []
            deadline = time.time() + 120
            while time.time() < deadline:
                counts = page.evaluate(FIT_JS)
                if counts is not None and (not seen or counts != seen[-1]):
                    seen.append(counts)
                if counts is not None and counts[1] == 3:
                    break
                time.sleep(0.5)
            assert seen, "the fit chart never drew"
            probes = [c[1] for c in seen]
            assert probes[-1] == 3 and len(set(probes)) >= 3, seen  # probes appeared one after another
            assert any(c[2] == 1 for c in seen), seen  # the running probe was drawn
            _cell(page, 0).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "fit-view.png"))
            wait_output(page, 1, "BUSY DONE", timeout=60)
            run_cell(page, 2)
            wait_output(page, 2, "FITS True 4", timeout=120)  # 3 sizes and the anchor
            browser.close()
    finally:
        _shutdown(proc)
