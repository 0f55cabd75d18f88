"""Level 3, every frontend a person meets, in Debian's Chromium (Playwright): JupyterLab 4 with Colab's kernel pins
(ipywidgets 7.7.1: the page cannot draw the dashboard, the cell shows the live text), Notebook 7 (ipywidgets 8),
classic Notebook 6.5 and JupyterLab 3 (ipywidgets 7 kernels, as they run them).

One test per frontend, one person's habits each: start, scroll, save and reload while the run goes, re-run the
cell, stop while another cell is busy, close the page before the run has ended, reopen. Asserted: the dashboard or
the live text is there; the copy saved in the .ipynb is current after the reload and after the closed page (the
end card is in it); a re-run never leaves a run unseen (where the page sends no cell id, the new output lists the
run still going with its Stop, and ``memscope.runs()`` has it); no process is left.

The old frontends' servers and Colab's kernel run from one venv made here with uv (Colab's pins from
``shared/fixtures/colab``, plus ``notebook<7`` and ``jupyterlab<4``), kept in ~/.cache/memscope-tests, never in
the repository.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import script

CHROMIUM = "/usr/bin/chromium"
pytest.importorskip("jupyterlab")
playwright = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM):
    pytest.skip("Debian chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
TOKEN = "memscope-frontends"
# Colab's versions of what draws and runs a notebook (fixtures/colab/colab-pip-freeze.txt), and the old frontends
# that run ipywidgets 7 (JupyterLab 3 needs jupyterlab_widgets 1.x for it).
OLD_PINS = [
    "ipykernel==6.17.1",
    "ipython==7.34.0",
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "traitlets==5.7.1",
    "jupyter_client==7.4.9",
    "notebook==6.5.7",
    "psutil==5.9.5",
    "anywidget==0.9.21",
    "bokeh==3.8.2",
    "pyzmq==26.2.1",
    "tornado==6.5.7",
    "numpy==2.1.3",
    "jupyterlab>=3.6,<4",
    "jupyterlab_widgets>=1.1,<2",
    "rich",
    "prometheus_client",
]
RUN_S = 30  # each run's length: long enough for every habit, short for CI
MAGIC = (
    f"%load_ext memscope\nrun = %memscope --interval 0.2 --pss-interval 1 --grace 1 {script('two_procs.py')} {RUN_S}"
)
CELLS = [
    MAGIC,
    "import time\ntime.sleep(6)\nprint('SLEPT')",
    "import memscope\nprint('RUNS', len(memscope.runs()), *[r.pid for r in memscope.runs()])",
    "run.stop()\nprint('STOPPED', run.wait(20)['exit']['cause'])",
]


def _old_venv() -> Path:
    """The venv with Colab's kernel pins and the ipywidgets 7 frontends (made once, reused)."""
    key = hashlib.sha256(("\n".join(OLD_PINS) + str(REPO)).encode()).hexdigest()[:12]
    d = Path.home() / ".cache" / "memscope-tests" / f"frontends-ipyw7-{key}"
    py = d / "bin" / "python"
    if (d / ".ready").exists():
        return d
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        pytest.skip("uv is not installed in the test venv (pip install uv): it makes the ipywidgets 7 venv")
    base = "/usr/bin/python3.11" if os.path.exists("/usr/bin/python3.11") else sys.executable
    log = []
    for cmd in (
        [str(uv), "venv", "-q", "--clear", "-p", base, str(d)],
        [str(uv), "pip", "install", "-q", "-p", str(py), *OLD_PINS],
        [str(uv), "pip", "install", "-q", "-p", str(py), "--no-deps", "-e", str(REPO)],
    ):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        log.append(r.stdout + r.stderr)
        if r.returncode:
            pytest.skip(f"cannot make the ipywidgets 7 venv ({' '.join(cmd[:3])}): {''.join(log)[-500:]}")
    (d / ".ready").write_text("ok")
    return d


FRONTENDS = {
    # name: (server's python: "old" or this one, app, kernel, path in the URL, what the cell shows)
    "jupyterlab4-colab-pins": ("this", "lab", "colabpins", "lab/tree", "text"),
    "notebook7": ("this", "notebook", "python3", "notebooks", "dashboard"),
    "notebook6.5": ("old", "notebook", "python3", "notebooks", "dashboard"),
    "jupyterlab3": ("old", "lab", "python3", "lab/tree", "dashboard"),
}


class Server:
    def __init__(self, name, tmp_path, port):
        where, app, kernel, path, self.shows = FRONTENDS[name]
        self.name, self.classic = name, name == "notebook6.5"
        self.sends_cell_id = not self.classic
        self.root = tmp_path / name
        self.root.mkdir()
        self.nb = self.root / "run.ipynb"
        nb = {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "id": f"c{i}",
                    "metadata": {},
                    "outputs": [],
                    "source": s,
                }
                for i, s in enumerate(CELLS)
            ],
            "metadata": {"kernelspec": {"display_name": kernel, "language": "python", "name": kernel}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        self.nb.write_text(json.dumps(nb))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(self.root / ".cfg"), PYDEVD_DISABLE_FILE_VALIDATION="1")
        env.pop("JUPYTER_PATH", None)
        python = sys.executable
        if where == "old" or kernel == "colabpins":
            old = _old_venv()
            if where == "old":
                python = str(old / "bin" / "python")
                env["PATH"] = f"{old / 'bin'}:{env['PATH']}"
            if kernel == "colabpins":
                spec = self.root / ".data" / "kernels" / "colabpins"
                spec.mkdir(parents=True)
                argv = [str(old / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
                (spec / "kernel.json").write_text(
                    json.dumps({"argv": argv, "display_name": "colabpins", "language": "python"})
                )
                env["JUPYTER_PATH"] = str(self.root / ".data")
        self.base = f"http://127.0.0.1:{port}"
        args = [python, "-m", "jupyter", app, "--no-browser", "--allow-root", f"--port={port}"]
        if self.classic:
            args += [
                "--NotebookApp.ip=127.0.0.1",
                f"--NotebookApp.token={TOKEN}",
                f"--NotebookApp.notebook_dir={self.root}",
            ]
        else:
            args += [
                "--ServerApp.port_retries=0",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.token={TOKEN}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.news_url=",
                f"--LabApp.workspaces_dir={self.root / '.ws'}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ]
        self.log = tmp_path / f"{name}.log"
        self.proc = subprocess.Popen(
            args, stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/api/status?token={TOKEN}", timeout=2).close()
                break
            except Exception:
                if self.proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"{name} did not start: " + self.log.read_text()[-2000:])
                time.sleep(0.3)
        self.url = f"{self.base}/{path}/run.ipynb?token={TOKEN}"

    def api(self, path, method="GET"):
        req = urllib.request.Request(
            f"{self.base}/api/{path}",
            data=b"" if method == "POST" else None,
            method=method,
            headers={"Authorization": f"token {TOKEN}"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def idle(self, timeout=120):
        t0 = time.time()
        states = None
        while time.time() < t0 + timeout:
            try:
                ks = self.api("kernels")
            except urllib.error.HTTPError:  # jupyter_server answers 500 while a kernel is half made: ask again
                ks = None
            states = [k["execution_state"] for k in ks or []]
            # Classic 6.5's server can miss a new kernel's first "idle" and say "starting" until the kernel is busy
            # once: after 20 s, "starting" is taken as ready (a cell run then waits in the kernel's queue).
            ready = ("idle", "starting") if time.time() > t0 + 20 else ("idle",)
            if states and all(x in ready for x in states):
                return
            time.sleep(0.3)
        raise AssertionError(f"{self.name}: the kernel never became idle ({states})")

    def close(self):
        for k in self.api("kernels") or []:
            try:
                self.api(f"kernels/{k['id']}", method="DELETE")
            except Exception:
                pass
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


class Page:
    """A notebook page, whichever frontend draws it."""

    def __init__(self, browser, server):
        self.s = server
        self.page = browser.new_page(viewport={"width": 1200, "height": 1000})
        self.page.on("dialog", lambda d: d.accept())  # "leave the page?" on a reload while the copy updates
        self.page.goto(server.url)
        self.cells_sel = "#notebook-container .cell" if server.classic else ".jp-Notebook .jp-Cell"
        self.page.wait_for_selector(self.cells_sel, timeout=120_000)
        time.sleep(1.0)
        server.idle()

    def cell(self, i):
        return self.page.locator(self.cells_sel).nth(i)

    def out(self, i):
        return self.cell(i).locator(".output" if self.s.classic else ".jp-OutputArea").inner_text()

    def dismiss(self):
        dialog = self.page.locator(".jp-Dialog, .modal-dialog")
        if dialog.count() and dialog.first.is_visible():
            print(f"{self.s.name} dialog:", dialog.first.inner_text()[:200].replace("\n", " | "), file=sys.stderr)
            dialog.first.locator(".jp-mod-accept, .btn-primary").first.click()
            time.sleep(0.3)

    def run(self, i):
        self.dismiss()
        editor = ".input_area" if self.s.classic else ".jp-InputArea-editor"
        self.cell(i).locator(editor).click()
        if not self.s.classic:
            self.page.keyboard.press("Escape")
        self.page.keyboard.press("Shift+Enter")

    def wait_out(self, i, pattern, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.out(i))
            if m:
                return m
            time.sleep(0.25)
        raise AssertionError(f"{self.s.name}: cell {i}: {pattern!r} never appeared in {self.out(i)[-600:]!r}")

    def wait_js(self, js, timeout=30_000):
        try:
            self.page.wait_for_function(js, timeout=timeout)
        except Exception:
            shot = os.path.join(os.environ.get("MEMSCOPE_SCREENSHOTS", str(self.s.root)), f"{self.s.name}-failed.png")
            self.page.screenshot(path=shot, full_page=True)
            raise AssertionError(f"{self.s.name}: never true: {js} (screenshot {shot})") from None

    def save(self):
        before = self.s.nb.stat().st_mtime_ns
        self.dismiss()
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        deadline = time.time() + 15
        while self.s.nb.stat().st_mtime_ns == before:
            assert time.time() < deadline, f"{self.s.name}: Ctrl+S saved nothing"
            if self.s.classic and time.time() > deadline - 12:
                # classic's shortcuts are off while a widget (the Stop just clicked) has the focus: its menu's save
                self.page.evaluate("() => Jupyter.notebook.save_checkpoint()")
                deadline -= 3
            time.sleep(0.2)
        time.sleep(0.3)


def saved_copies(nb_path):
    """The static copies the saved notebook holds (their HTML), in cell order."""
    nb = json.loads(Path(nb_path).read_text())
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            html = (o.get("data") or {}).get("text/html")
            html = "".join(html) if isinstance(html, list) else html
            if html and "memscope-static" in html:
                out.append(html)
    return out


def elapsed_in(html):
    """The seconds the status line of a copy says the run has gone."""
    m = re.search(r"● (\w+)</b> (\d+):(\d\d):(\d\d)", html)
    if m is None:  # the copy displayed with the dashboard, before its first push
        assert "memscope-status" not in html, html[:600]
        return "", 0
    return m.group(1), int(m.group(2)) * 3600 + int(m.group(3)) * 60 + int(m.group(4))


def run_pids(page, server):
    page.run(2)
    m = page.wait_out(2, r"RUNS (\d+)((?: \d+)*)\n")
    return int(m.group(1)), [int(x) for x in m.group(2).split()]


def _running(proc):
    try:
        return proc.status() != psutil.STATUS_ZOMBIE  # a zombie has ended; its parent has not reaped it yet
    except psutil.NoSuchProcess:
        return False


def tree(pid):
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.fixture
def shots(tmp_path):
    return os.environ.get("MEMSCOPE_SCREENSHOTS", str(tmp_path))


@pytest.mark.parametrize("name", list(FRONTENDS))
def test_a_persons_habits_leave_no_run_unseen_and_no_copy_stale(name, tmp_path, shots):
    t_start = time.monotonic()
    port = 8911 + list(FRONTENDS).index(name)
    server = Server(name, tmp_path, port)
    watched = []  # every run's processes, to check nothing is left
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = Page(browser, server)
            page.run(0)
            if server.shows == "text":
                _live_text(page, server, shots)
            else:
                _dashboard(browser, page, server, shots, watched)
            browser.close()
    finally:
        left = []
        for procs in watched:  # every run's processes gone (killed here if not, and the test fails)
            _, alive = psutil.wait_procs(procs, timeout=20)
            left += [x for x in alive if _running(x)]
        for proc in left:
            proc.kill()
        server.close()
    assert not left, f"{name}: processes left: {left}"
    print(f"{name}: {time.monotonic() - t_start:.0f} s", file=sys.stderr)


def _live_text(page, server, shots):
    """A page that cannot draw the kernel's widgets: the cell shows the text status, updated in place, and why."""
    pg = page.page
    sel = ".memscope-static"
    page.wait_js(f"() => [...document.querySelectorAll('{sel}')].some(e => e.offsetParent !== null)", 60_000)
    # the widget manager's error box is hidden under the copy, whose first line says why and what fixes it
    assert pg.evaluate(
        "() => [...document.querySelectorAll('.jupyter-widgets-error-widget')].every(e => !e.offsetParent)"
    )
    why = pg.locator(".memscope-why").first.inner_text()
    assert "ipywidgets 7.7.1" in why and "pip install" in why, why
    first = pg.locator(sel).first.inner_text()
    assert "running" in first and "Stop: run.stop()" in first, first
    _, t1 = elapsed_in(pg.locator(sel).first.inner_html())
    deadline = time.time() + 20
    while True:  # updated in place: one copy, its status line moves on
        assert pg.locator(sel).count() == 1
        _, t2 = elapsed_in(pg.locator(sel).first.inner_html())
        if t2 > t1:
            break
        assert time.time() < deadline, "the text status did not change in 20 s"
        time.sleep(0.5)
    pg.mouse.wheel(0, 400)
    pg.screenshot(path=os.path.join(shots, f"{server.name}-live-text.png"))
    page.run(3)  # Stop, as the text says
    page.wait_out(3, r"STOPPED stopped_by_user")
    page.wait_js("() => document.querySelector('.memscope-static .memscope-verdict') !== null")
    assert "Stop: run.stop()" not in pg.locator(sel).first.inner_text()
    page.save()
    copies = saved_copies(server.nb)
    assert len(copies) == 1 and "memscope-verdict" in copies[0] and "stopped_by_user" in copies[0]
    assert elapsed_in(copies[0])[0] == "stopped_by_user"


def _dashboard(browser, page, server, shots, watched):
    pg = page.page
    status = ".memscope-status"
    page.wait_js(f"() => [...document.querySelectorAll('{status}')].some(e => e.textContent.includes('running'))")
    # the static copy is hidden while the live dashboard is drawn
    page.wait_js("() => [...document.querySelectorAll('.memscope-static')].every(e => e.offsetParent === null)")
    n, pids = run_pids(page, server)
    assert n == 1
    watched.append(tree(pids[0]))
    pg.mouse.wheel(0, 300)
    # Save and reload while the run goes: the saved copy must keep up with the run after the reload.
    page.save()
    pg.reload()
    pg.wait_for_selector(page.cells_sel, timeout=120_000)
    page.wait_js(
        f"() => [...document.querySelectorAll('{status}')].some(e => e.textContent.includes('running'))", 60_000
    )
    _, at_reload = elapsed_in(saved_copies(server.nb)[0])
    time.sleep(5)
    page.save()
    state, later = elapsed_in(saved_copies(server.nb)[0])
    assert state == "running" and later >= at_reload + 3, (
        f"the saved copy went stale after the reload: {at_reload} → {later}"
    )
    # Re-run the cell.
    page.run(0)
    if server.sends_cell_id:
        page.wait_js("() => [...document.querySelectorAll('.memscope-status')].length >= 1")
        page.wait_out(0, r"stopped the previous run of this cell")
        n, pids2 = run_pids(page, server)
        assert n == 1 and pids2 != pids
    else:
        # No cell id: the first run goes on, and the new output says so, with its Stop.
        page.wait_js(
            "() => [...document.querySelectorAll('.memscope-others')].some(e => e.textContent.includes('1 other run'))"
        )
        n, both = run_pids(page, server)
        assert n == 2 and pids[0] in both
        pg.screenshot(path=os.path.join(shots, f"{server.name}-rerun.png"))
        pg.locator(".memscope-other-stop").first.click()
        t0 = time.monotonic()
        while any(_running(x) for x in watched[0]):
            assert time.monotonic() - t0 < 15, "the Stop beside the other run did not stop it"
            time.sleep(0.2)
        pids2 = [x for x in both if x != pids[0]]
        n, _ = run_pids(page, server)
        assert n == 1
    watched.append(tree(pids2[0]))
    # Stop while another cell is busy, save, and close the page before the run has ended (the stop is queued
    # behind the sleeping cell where the kernel has no subshells).
    page.run(1)
    time.sleep(1.0)
    pg.locator(".memscope-btn-stop").last.click()
    pg.screenshot(path=os.path.join(shots, f"{server.name}-stop-clicked.png"))
    page.save()
    pg.close()
    time.sleep(8)  # the sleep ends, the stop acts, the run ends with no page open
    server.idle()
    page = Page(browser, server)
    pg = page.page
    page.wait_js(
        "() => [...document.querySelectorAll('.memscope-verdict')].some(e => e.textContent.includes('stopped_by_user'))"
    )
    pg.screenshot(path=os.path.join(shots, f"{server.name}-reopened.png"))
    deadline = time.time() + 10
    while True:
        page.save()
        copies = saved_copies(server.nb)
        if copies and elapsed_in(copies[-1])[0] == "stopped_by_user":
            break
        assert time.time() < deadline, f"the saved copy never got the end card: {elapsed_in(copies[-1])}"
        time.sleep(1)
    assert "memscope-verdict" in copies[-1]
    n, _ = run_pids(page, server)
    assert n == 0
    # The buttons of the ended run are greyed (disabled and dimmed), the table's cells apart.
    assert pg.evaluate(
        "() => [...document.querySelectorAll('.memscope-btn-stop')].every(b => b.disabled && b.style.opacity === '0.45')"
    )
