"""The README's pictures, made from a real run in a real JupyterLab, and the README's first screen tried for real.

    python benchmarks/screenshots.py                 # ~3 min: docs/dashboard.png, docs/card.png, docs/census.png
    python benchmarks/screenshots.py --fresh /tmp/fresh   # ~5-10 min: the README's first screen on a fresh venv

Pictures: JupyterLab (this interpreter's, headless, a token, 127.0.0.1, a temporary root laid out as a clone:
``memscope/demo/train_demo.py``) opens in Debian's chromium (/usr/bin/chromium, Playwright) a notebook whose
first cell is the README's own (the ``python`` block of its first screen), runs it, and saves the cell with the
live dashboard once its status line carries a leak verdict (docs/dashboard.png), then the end card once the run
has ended (docs/card.png); a second notebook runs a torch script that keeps attention maps with their graph,
clicks "Tensor census" twice, and saves the census panel (docs/census.png). It writes docs/screenshots.json: each
picture's sha256, memscope's version and commit, and the sha256 of the files whose output the pictures show
(``UI_FILES``). tests/test_readme.py checks that every picture the README and docs/ show is listed there with its
hash, and that those files have not changed since: change the dashboard, run this again.

--fresh DIR: the README's first screen as a newcomer follows it, every command as written, timed: a new venv in
DIR, torch 2.13.0 in it (the environment a training already has), then the first screen's shell lines with that
venv active (``git clone <address>`` clones this checkout's HEAD: commit first), ``jupyter lab`` started headless
(the README's command with --no-browser, a port and a token), a new notebook in the clone's folder with the first
screen's cell, opened in chromium and run: the figures are the seconds from the venv's creation to each step, up
to the dashboard's chart drawing points and its verdict. Nothing is written into this checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MANIFEST = DOCS / "screenshots.json"
CHROMIUM = "/usr/bin/chromium"
TOKEN = "memscope-shots"
# What the pictures show comes out of these: a change to any of them may change a picture.
UI_FILES = (
    "memscope/ui/dashboard.py",
    "memscope/ui/dashboard_panels.py",
    "memscope/ui/dashboard_buttons.py",
    "memscope/ui/fragments.py",
    "memscope/ui/chart.py",
    "memscope/ui/chart.js",
    "memscope/ui/census.py",
    "memscope/ui/terminal.py",
    "memscope/analysis/advice.py",
)
# A verdict on the status line, in the words terminal.verdict_text uses today (and the growth kinds' to come).
VERDICT = re.compile(
    r"slow leak|leak in |grows steadily|no leak|leak:|spikes:(?! not yet)|only spikes|flat|stepped|copy-on-read", re.I
)
CENSUS_SCRIPT = ROOT / "tests" / "scripts" / "attention_leak.py"


def ui_hash(root: Path = ROOT) -> str:
    """One sha256 over UI_FILES' names and contents (a missing file counts as empty)."""
    h = hashlib.sha256()
    for name in UI_FILES:
        p = root / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_screen(readme: Path = ROOT / "README.md") -> tuple[list[str], str]:
    """The README's first screen: the lines of its ``bash`` block and the source of its ``python`` block (the
    notebook cell), between ``<!-- first-screen -->`` and ``<!-- /first-screen -->``."""
    text = readme.read_text()
    m = re.search(r"<!-- first-screen -->(.*?)<!-- /first-screen -->", text, re.S)
    if not m:
        raise SystemExit("README.md has no <!-- first-screen --> ... <!-- /first-screen --> section")
    blocks = dict(re.findall(r"```(bash|python)\n(.*?)```", m.group(1), re.S))
    if "bash" not in blocks or "python" not in blocks:
        raise SystemExit("the README's first screen needs one ```bash and one ```python block")
    return [ln for ln in blocks["bash"].splitlines() if ln.strip()], blocks["python"].rstrip("\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _notebook(path: Path, cells: list[str]) -> None:
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": src}
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb))


def serve(root: Path, jupyter: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``jupyter lab`` headless over ``root``; return the process and the server's base URL once it answers."""
    port = _free_port()
    env = dict(env or os.environ, JUPYTER_CONFIG_DIR=str(root / ".cfg"))
    proc = subprocess.Popen(
        [
            *jupyter,
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
        cwd=root,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2).close()
            return proc, base
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit("jupyter lab did not start: " + log.read_text()[-2000:]) from None
            time.sleep(0.5)


def shutdown(proc: subprocess.Popen) -> None:
    """End the server and its kernels (its own process group, started here)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def launch(p):  # noqa: ANN001, ANN201 (playwright's types)
    return p.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--no-first-run"],
    )  # fmt: skip


def open_and_run(browser, url: str, width: int = 1100, height: int = 1400):  # noqa: ANN001, ANN201
    """A page on the notebook at ``url``, its kernel idle, with its first cell run (Shift+Enter, as a person)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=180_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", state="attached", timeout=180_000)
    # JupyterLab's toasts ("Would you like to get notified about official Jupyter news?") stay out of the pictures.
    page.add_style_tag(content=".Toastify { display: none !important; }")
    cell = page.locator(".jp-Notebook:visible .jp-Cell").first  # the notebook opened, not another tab's
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text()
    for _ in range(5):
        dialog = page.locator(".jp-Dialog")
        if dialog.count() and dialog.first.is_visible():
            dialog.first.locator(".jp-mod-accept").first.click()
            time.sleep(0.5)
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")
        page.keyboard.press("Shift+Enter")
        deadline = time.time() + 5
        while time.time() < deadline and prompt.inner_text() in (before, "[ ]:", ""):
            time.sleep(0.2)
        if prompt.inner_text() not in (before, "[ ]:", ""):
            break
    try:
        cell.locator(".memscope-status").first.wait_for(timeout=180_000)
    except Exception:
        page.screenshot(path="/tmp/memscope-shots-failed.png")
        raise SystemExit("the first cell shows no dashboard (/tmp/memscope-shots-failed.png)") from None
    return page


def wait_verdict(page, timeout_s: float = 150, prefer: re.Pattern[str] | None = None, until_s: float = 0) -> str:  # noqa: ANN001
    """The status line's text once it carries a verdict (not "not yet known", not "a verdict needs ..."). With
    ``prefer``, keep waiting for a verdict that matches it until the run is ``until_s`` s old, then take what
    is there (the demo's leak reads "stepped up once" until enough epochs have kept their buffers)."""
    deadline = time.time() + timeout_s
    text, found = "", ""
    while time.time() < deadline:
        text = page.locator(".memscope-status").first.inner_text()
        if "not yet known" not in text and "needs" not in text and "leaning" not in text and VERDICT.search(text):
            found = text
            m = re.search(r"running (\d+):(\d\d):(\d\d)", text)
            age = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) if m else until_s
            if prefer is None or prefer.search(text) or age >= until_s:
                return text
        elif found and "running" not in text:
            return found
        time.sleep(0.5)
    if found:
        return found
    raise SystemExit(f"no verdict on the status line after {timeout_s:.0f} s: {text!r}")


# The chart's points as the page holds them: the lengths of the Bokeh plots' data sources (browser_long.py's way).
POINTS_JS = """() => {
  const B = window.Bokeh;
  if (!B || !B.index || !document.querySelector('.memscope-chart')) return 0;
  const seen = new Set(); let points = 0;
  for (const v of [...B.index]) {
    if (!v.frame || !v.model.x_range) continue;
    for (const r of v.model.renderers || []) {
      const ds = r.data_source;
      if (!ds || seen.has(ds)) continue;
      seen.add(ds);
      try { points += ds.get_length() || 0; } catch (e) { /* not a columnar source */ }
    }
  }
  return points;
}"""


def chart_points(page) -> int:  # noqa: ANN001
    """Points the page's chart has drawn."""
    return int(page.evaluate(POINTS_JS) or 0)


def make_pictures(out: Path) -> dict[str, dict[str, str]]:
    """Run the README's cell and the census in JupyterLab; save the pictures into ``out``; return what they show."""
    from playwright.sync_api import sync_playwright

    _, cell = first_screen()
    pictures: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="memscope-shots-") as tmp:
        root = Path(tmp)
        # A clone's layout, for the README's relative path: the package itself (a folder named memscope without it
        # would shadow the installed package in the kernel, whose first sys.path entry is the notebook's folder).
        (root / "memscope").symlink_to(ROOT / "memscope")
        shutil.copy(CENSUS_SCRIPT, root / "train.py")
        _notebook(root / "quickstart.ipynb", [cell])
        _notebook(root / "census.ipynb", ["%load_ext memscope\nrun = %memscope train.py 90"])
        proc, base = serve(root, [sys.executable, "-m", "jupyter", "lab"], root / "lab.log")
        try:
            with sync_playwright() as p:
                browser = launch(p)
                page = open_and_run(browser, f"{base}/lab/tree/quickstart.ipynb?token={TOKEN}")
                status = wait_verdict(page, prefer=re.compile("slow leak|grows steadily"), until_s=54)
                time.sleep(2)  # a few more pushes: the chart past the verdict's moment
                cell_el = page.locator(".jp-Notebook .jp-Cell").first
                cell_el.screenshot(path=str(out / "dashboard.png"))
                pictures["docs/dashboard.png"] = {"shows": "the live dashboard of the README's cell: " + status}
                page.wait_for_selector(".memscope-verdict", timeout=180_000)
                time.sleep(1)
                card = page.locator(".memscope-verdict").first
                card.screenshot(path=str(out / "card.png"))
                pictures["docs/card.png"] = {"shows": "the end card: " + card.inner_text()[:300]}
                page.close()

                page = open_and_run(browser, f"{base}/lab/tree/census.ipynb?token={TOKEN}&reset")
                try:
                    page.wait_for_selector(".memscope-btn-census", timeout=120_000)
                except Exception:
                    page.screenshot(path="/tmp/memscope-shots-failed.png")
                    raise SystemExit("no Tensor census button (/tmp/memscope-shots-failed.png)") from None
                time.sleep(6)
                button = page.locator(".memscope-btn-census").first
                button.click()
                page.wait_for_function(
                    "() => [...document.querySelectorAll('.memscope-census')].some(e =>"
                    " e.textContent.includes('Tensor census of pid'))",
                    timeout=90_000,
                )
                time.sleep(12)
                button.click()
                page.wait_for_function(
                    "() => [...document.querySelectorAll('.memscope-census')].some(e =>"
                    " e.textContent.includes('since the census at') && e.textContent.includes('.detach()'))",
                    timeout=90_000,
                )
                census = page.locator(".memscope-census").first
                census.screenshot(path=str(out / "census.png"))
                pictures["docs/census.png"] = {"shows": "two tensor censuses: " + census.inner_text()[:200]}
                page.locator(".memscope-btn-stop").first.click()
                page.wait_for_selector(".memscope-verdict", timeout=60_000)
                browser.close()
        finally:
            shutdown(proc)
    return pictures


def write_manifest(pictures: dict[str, dict[str, str]]) -> dict:
    """docs/screenshots.json: each picture's sha256, what it shows, and what made it."""
    from memscope.version import __version__

    def git(*a: str) -> str:
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    manifest = {
        "made_by": "benchmarks/screenshots.py",
        "memscope_version": __version__,
        "commit": git("rev-parse", "HEAD") + ("+changes" if git("status", "--porcelain", "--", *UI_FILES) else ""),
        "ui_files": list(UI_FILES),
        "ui_sha256": ui_hash(),
        "pictures": {name: {"sha256": sha256(ROOT / name), **info} for name, info in sorted(pictures.items())},
    }
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def fresh(venv: Path) -> None:
    """The README's first screen on a fresh venv, timed (see the module's docstring)."""
    from playwright.sync_api import sync_playwright

    lines, cell = first_screen()
    if venv.exists():
        raise SystemExit(f"{venv} exists: give a new directory")
    work = venv.parent / (venv.name + "-home")
    work.mkdir(parents=True)
    marks: list[tuple[str, float]] = []
    t0 = time.monotonic()

    def mark(what: str) -> None:
        marks.append((what, time.monotonic() - t0))
        print(f"{marks[-1][1]:7.1f} s  {what}", flush=True)

    def sh(cmd: str, cwd: Path) -> None:
        r = subprocess.run(["bash", "-c", f"set -e; . {venv}/bin/activate; {cmd}"], cwd=cwd)
        if r.returncode:
            raise SystemExit(f"failed ({r.returncode}): {cmd}")

    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    mark(f"python3 -m venv {venv}")
    sh("pip install -q torch==2.13.0", work)
    mark("pip install torch==2.13.0 (the environment a training already has)")
    cwd = work
    jupyter_line = None
    for line in lines:
        cmd = line.split("  #")[0].strip()
        if cmd.startswith("jupyter lab") or "&& jupyter lab" in cmd:
            jupyter_line = cmd
            before, _, _ = cmd.partition("jupyter lab")
            before = before.rstrip().removesuffix("&&").strip()
            if before.startswith("cd "):
                cwd = (cwd / before[3:].strip()).resolve()
            break
        if cmd.startswith("git clone"):
            cmd = re.sub(r"git clone (<[^>]*>|\S+)", f"git clone -q {ROOT}", cmd)
        sh(cmd, cwd)
        mark(line.strip())
    if jupyter_line is None:
        raise SystemExit("the first screen starts no `jupyter lab`")
    _notebook(cwd / "Untitled.ipynb", [cell])  # File > New > Notebook, the README's cell typed in
    env = dict(os.environ, PATH=f"{venv}/bin:" + os.environ["PATH"], VIRTUAL_ENV=str(venv))
    proc, base = serve(cwd, [f"{venv}/bin/jupyter", "lab"], work / "lab.log", env=env)
    mark("jupyter lab (headless) answers")
    try:
        with sync_playwright() as p:
            browser = launch(p)
            page = open_and_run(browser, f"{base}/lab/tree/Untitled.ipynb?token={TOKEN}")
            mark("the dashboard's status line shows: " + page.locator(".memscope-status").first.inner_text()[:80])
            deadline = time.time() + 120
            while chart_points(page) == 0 and time.time() < deadline:
                time.sleep(0.2)
            mark(f"the chart draws ({chart_points(page)} points)")
            mark("verdict: " + wait_verdict(page)[:160])
            page.wait_for_selector(".memscope-verdict", timeout=180_000)
            mark("end card: " + page.locator(".memscope-verdict").first.inner_text()[:160].replace("\n", " "))
            browser.close()
    finally:
        shutdown(proc)
    print(json.dumps(marks, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", type=Path, metavar="DIR", help="try the README's first screen on a new venv in DIR")
    ap.add_argument("--out", type=Path, default=DOCS, help="where the pictures go (default docs/)")
    a = ap.parse_args()
    if not os.path.exists(CHROMIUM):
        raise SystemExit("Debian chromium is not installed (apt-get install -y chromium)")
    if a.fresh:
        fresh(a.fresh.resolve())
        return
    pictures = make_pictures(a.out)
    if a.out.resolve() == DOCS.resolve():
        m = write_manifest(pictures)
        print(json.dumps(m, indent=1))


if __name__ == "__main__":
    main()
