"""What every frontend relies on, checked on a real kernel (jupyter_client) and in node: the static copy is the
live text where the dashboard cannot be drawn (updated in place, saying why and how to stop) and reaches every page
through the dashboard's CopyKeeper; a re-run without a cell id (classic Notebook 6.5) lists the runs still going,
each with a Stop, and ``memscope.runs()`` has them; the small words (paused range, the limit's time, census)."""

import json
import re
import shutil
import subprocess
import time

import pytest
from conftest import script
from test_kernel import _alive, _close, _pids_of, _printed, _start_kernel, drain, execute

import memscope
from memscope.analysis.advice import advise
from memscope.ui import chart as chart_mod
from memscope.ui import dashboard_panels as P


@pytest.fixture
def kernel(tmp_path):
    km, kc = _start_kernel(tmp_path)
    yield kc
    _close(km, kc)


CMD = f"--grace 1 --interval 0.2 {script('two_procs.py')} 40"


def _copies(msgs):
    """The static copies displayed or updated by these messages: (msg_type, display_id, html)."""
    out = []
    for m in msgs:
        if m["msg_type"] in ("display_data", "update_display_data"):
            html = m["content"]["data"].get("text/html", "")
            if "memscope-static" in html:
                out.append((m["msg_type"], m["content"].get("transient", {}).get("display_id"), html))
    return out


def _keeper_html(msgs):
    """What the CopyKeeper widget was told, in order."""
    keepers = {
        m["content"]["comm_id"]
        for m in msgs
        if m["msg_type"] == "comm_open"
        and "html" in m["content"]["data"].get("state", {})
        and "key" in m["content"]["data"]["state"]
    }
    out = []
    for m in msgs:
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] in keepers:
            state = m["content"]["data"].get("state", {})
            if "html" in state:
                out.append(state["html"])
    return keepers, out


def test_the_static_copy_is_a_live_text_kept_by_the_kernel(kernel, tmp_path):
    """The copy beside the dashboard says why the dashboard may be missing and how to stop, changes every couple
    of seconds (the old one every 30 s: a page that cannot draw widgets showed "running 0:00:00" for half a
    minute), and the same HTML goes to the CopyKeeper (which every page drawing the dashboard writes into the
    saved output; a display id reaches only the page that received the display). The end card arrives in both."""
    kc = kernel
    _, msgs = execute(kc, f"%load_ext memscope\nrun = %memscope --record {tmp_path}/runs {CMD}")
    shown = _copies(msgs)
    assert len(shown) == 1 and shown[0][0] == "display_data" and shown[0][1]
    display_id = shown[0][1]
    msgs += drain(kc, 6.0)
    updates = [c for c in _copies(msgs) if c[0] == "update_display_data" and c[1] == display_id]
    statuses = {re.search(r"● \w+</b> [\d:]+", h).group(0) for _, _, h in updates if "memscope-status" in h}
    assert len(statuses) >= 2, statuses  # updated in place while the run goes, several times in 6 s
    last = updates[-1][2]
    assert "Stop: run.stop()" in last and "memscope.runs()" in last
    assert re.search(r"ipywidgets [\d.]+", last)  # why the dashboard may be missing, and what fixes it
    keepers, carried = _keeper_html(msgs)
    assert len(keepers) == 1 and carried and carried[-1] == last
    _, end = execute(kc, "run.stop()\nprint('CAUSE', run.wait(20)['exit']['cause'])")
    end += drain(kc, 3.0)
    assert "CAUSE stopped_by_user" in _printed(end)
    final = [h for t, i, h in _copies(end) if i == display_id][-1]
    assert "memscope-verdict" in final and "stopped_by_user" in final and "Stop: run.stop()" not in final
    assert _keeper_html(msgs + end)[1][-1] == final


def _click(kc, comm_id):
    """Click an ipywidgets Button, as the browser does."""
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "custom", "content": {"event": "click"}}})
    kc.shell_channel.send(msg)


def test_a_rerun_without_a_cell_id_lists_the_runs_still_going_with_a_stop(kernel, tmp_path):
    """Classic Notebook 6.5 sends no cell id: a re-run cannot know which run the cell started before. It stops
    none, and its new dashboard lists the run still going with a Stop that stops it; memscope.runs() has both.
    (The old code said nothing: the first run went on without a dashboard.)"""
    kc = kernel
    cell = f"%load_ext memscope\nrun = %memscope --record {tmp_path}/runs {CMD}"
    execute(kc, f"{cell}\nfirst = run")
    first = _pids_of(kc, "first")
    _, msgs = execute(kc, cell)  # the same cell again, no cell id
    second = _pids_of(kc, "run")
    assert all(_alive(p) for p in first + second)
    wire = json.dumps([m["content"] for m in msgs])
    assert "1 other run of this kernel still going" in wire
    _, out = execute(
        kc,
        "import memscope\nprint('RUNS', [r is first for r in memscope.runs()], first.run_id in str(memscope.runs()))",
    )
    assert "RUNS [True, False]" in _printed(out)
    stops = [
        m["content"]["comm_id"]
        for m in msgs
        if m["msg_type"] == "comm_open" and m["content"]["data"]["state"].get("description") == "Stop"
    ]
    assert len(stops) == 1
    _click(kc, stops[0])
    t0 = time.monotonic()
    while any(_alive(p) for p in first):
        assert time.monotonic() - t0 < 15, "the Stop beside the other run did not stop it"
        time.sleep(0.1)
    assert all(_alive(p) for p in second)
    _, out = execute(kc, "print('AFTER', len(memscope.runs()), first.summary()['exit']['cause'])\nrun.kill()")
    assert "AFTER 1 stopped_by_user" in _printed(out)


def test_runs_is_public_and_empty_without_runs():
    assert "runs" in memscope.__all__ and memscope.runs() == []


def test_missing_line_names_the_fix_for_the_kernels_ipywidgets(monkeypatch):
    monkeypatch.setattr(P.w, "__version__", "7.7.1")
    seven = P.missing_line()
    assert "ipywidgets 7.7.1" in seven and "pip install -U 'ipywidgets>=8'" in seven and "\n" not in seven
    monkeypatch.setattr(P.w, "__version__", "8.1.5")
    assert "jupyterlab_widgets" in P.missing_line()


def test_the_copys_text_for_a_text_only_frontend():
    from memscope.ui.static_view import static_html

    html = static_html(
        "k",
        "<div class='memscope-status'><b>● running</b> 0:00:05 · now 4 KiB</div>",
        "",
        "",
        {},
        why="why <x>",
        stop="Stop: run.stop()",
    )
    text = P.plain_text(html)
    assert text.splitlines()[:3] == ["why <x>", "● running 0:00:05 · now 4 KiB", "Stop: run.stop()"], text


def test_the_cards_time_to_the_limit_has_one_format_and_census_works_after_the_magic():
    from memscope.ui.terminal import verdict_text

    leak = {
        "verdict": "leak",
        "pace": "slow",
        "slope_bytes_per_s": 2000.0,
        "time_to_limit_s": 46616.0,
        "roles": ["main"],
    }
    summary = {"leak": leak, "exit": {"cause": "ok"}, "spikes": []}
    words = " ".join(a["text"] for a in advise(summary))
    assert "12:56:56" in words and not re.search(r"\d+ min\b", words), words
    assert "12:56:56" in verdict_text(leak)
    assert "%memscope" in words and "on the handle of memscope.run" not in words


def test_the_process_table_keeps_its_columns_apart():
    from memscope.ui.fragments import process_table

    html = process_table({1: {"role": "main", "rss": 121 << 20, "private": 101 << 20}})
    assert re.search(r"<style>[^<]*\.memscope-procs td[^<]*padding", html)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_paused_chart_never_says_a_negative_time(tmp_path):
    js = tmp_path / "chart.mjs"
    js.write_text(chart_mod._ESM, encoding="utf-8")
    probe = tmp_path / "probe.mjs"
    probe.write_text(
        f"const m = await import({json.dumps(js.as_uri())});\n"
        "console.log(m.pausedRange(-12.9, 41.4)); console.log(m.pausedRange(-5, -1)); console.log(m.pausedRange(10, 70));"
    )
    out = subprocess.run(["node", str(probe)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("0") and lines[1].startswith("0"), lines
    assert not any(re.search(r"(^|–)-", line) for line in lines), lines


def test_a_kernel_without_widgets_shows_a_live_status_line_and_how_to_stop(kernel, tmp_path):
    """Where the kernel renders no widgets, the cell's one text display carries a status line that changes while
    the run goes (it said only "started" until the end) and how to stop it."""
    execute(kernel, "%load_ext memscope\nimport memscope.magic as M\nM.widgets_can_render = lambda ip: False")
    _, msgs = execute(kernel, f"run = %memscope --record {tmp_path}/runs {CMD}")
    msgs += drain(kernel, 5.0)
    texts = [m["content"]["data"]["text/plain"] for m in msgs if m["msg_type"] == "update_display_data"]
    lines = {t.splitlines()[1] for t in texts if len(t.splitlines()) > 1 and "● running" in t}
    assert len(lines) >= 2, texts  # updated in place
    assert all("Stop: run.stop()" in line for line in lines)
    _, out = execute(kernel, "run.stop()\nprint('CAUSE', run.wait(20)['exit']['cause'])")
    out += drain(kernel, 3.0)
    final = [m["content"]["data"]["text/plain"] for m in out if m["msg_type"] == "update_display_data"][-1]
    assert "● running" not in final and "stopped_by_user" in final, final
