"""The standalone HTML report (memscope.ui.report), on records of real runs."""

import html
import os
import re
import shutil
import sqlite3
import sys
import time

import pytest

import memscope
from memscope.ui.report import hidden_lines, memory_figure, output_lines, render_html, write_html

SCRIPT_TAG = "<script>alert(1)</script>"
IMG_TAG = "<img src=x onerror=alert(1)>"

# Allocates ~120 MiB, prints 250 numbered rows, two progress bars redrawn with \r (the second never ended by a
# newline), the payloads on stdout and stderr and as a phase name, then dies of a ValueError carrying them.
# The bars' states are computed, so that none of them appears literally in the command line the page shows.
CODE = r"""
import sys, time, memscope
buf = bytearray(120 * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("starting", flush=True)
for i in range(250):
    print("row %03d" % i)
sys.stdout.flush()
with memscope.phase("<img src=x onerror=alert(1)>"):
    for i in range(1, 6):
        print("\repoch 1: %d%%|%s" % (i * 20, "#" * i), end="", flush=True)
        time.sleep(0.15)
    print(flush=True)
print("<script>alert(1)</script>", flush=True)
print("<img src=x onerror=alert(1)>", file=sys.stderr, flush=True)
time.sleep(0.6)
for i in range(1, 4):
    print("\rstep %d/3" % i, end="", flush=True)
    time.sleep(0.15)
raise ValueError("bad <img src=x onerror=alert(1)> and <script>alert(1)</script>")
"""


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    run = memscope.run(
        [sys.executable, "-c", CODE], record_dir=str(d), interval_s=0.05, pss_interval_s=0.3, output="capture"
    )
    summary = run.wait(60)
    assert summary is not None and summary["exit"]["cause"] == "exception", summary
    return run.record_path


@pytest.fixture(scope="module")
def page(record, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert write_html(record, str(out)) == str(out)
    return out


def _output_pre(text: str) -> list[str]:
    m = re.search(r"<pre class='memscope-output'[^>]*>(.*?)</pre>", text, re.S)
    assert m, "no output section"
    return m.group(1).split("\n")


def test_page_is_one_self_contained_file(page):
    assert os.listdir(page.parent) == ["report.html"]
    text = page.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<!DOCTYPE html>")
    # BokehJS itself is in the page, not fetched from anywhere.
    assert "Bokeh" in text and "cdn.bokeh.org" not in text
    assert not re.search(r"<script[^>]*\ssrc\s*=", text, re.I)
    assert not re.search(r"<link[^>]*\shref\s*=", text, re.I)
    assert 500_000 < len(text.encode()) < 4_000_000


def test_page_shows_verdict_chart_processes(page, record):
    text = page.read_text(encoding="utf-8")
    assert "exception" in text
    assert "ValueError: bad" in text
    assert "<details><summary>stack</summary>" in text and "Traceback (most recent call last)" in text
    assert html.escape(record) in text
    assert "peak tree PSS" in text and "limit " in text
    # The chart: the main's PSS stacked (renderer "pss:main"), the main's RSS, and the phase band's label.
    assert '"name":"pss:main"' in text
    assert '"name":"main RSS"' in text
    assert "BoxAnnotation" in text
    # The process table: the main, dead, with its exit.
    assert "<td>main</td>" in text and "exited 1" in text


def test_untrusted_text_is_escaped(page):
    text = page.read_text(encoding="utf-8")
    for payload in (SCRIPT_TAG, IMG_TAG):
        assert payload not in text
        assert html.escape(payload, quote=False) in text
    assert "<img src=x onerror" not in text and "&lt;img src=x onerror" in text
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)" in text
    assert "onerror=alert(1)>" not in text
    # Only BokehJS, the document's data (escaped JSON) and the page's own scroll snippet are scripts.
    assert len(re.findall(r"<script\b", text)) <= 6


def test_output_tail_last_200_lines_with_progress_bars_collapsed(page):
    lines = _output_pre(page.read_text(encoding="utf-8"))
    assert len(lines) == 200
    assert "row 000" not in lines and "row 249" in lines
    # Each progress bar shows its final state only.
    assert "epoch 1: 100%|#####" in lines
    assert not any(re.search(r"epoch 1: [1-8]0%", line) for line in lines)
    assert "step 3/3" in lines
    assert "step 1/3" not in lines and "step 2/3" not in lines
    # The unfinished bar sits where it was written, before the traceback; the exception's line ends the tail.
    assert lines.index("step 3/3") < lines.index("Traceback (most recent call last):")
    assert lines[-1].startswith("ValueError: bad &lt;img src=x onerror=alert(1)&gt;")
    assert html.escape(SCRIPT_TAG, quote=False) in lines


def test_render_html_without_stored_summary(record, tmp_path):
    # A record whose memscope died before writing the summary: the report computes it from the samples.
    copy = tmp_path / "copy.sqlite"
    shutil.copy(record, copy)
    con = sqlite3.connect(copy)
    con.execute("UPDATE run SET summary=NULL")
    con.commit()
    con.close()
    text = render_html(str(copy))
    assert "exception" in text and "&lt;img src=x onerror" in text and "<img src=x onerror" not in text


def test_quiet_run(tmp_path):
    run = memscope.run(
        [sys.executable, "-c", "import time; time.sleep(0.4)"],
        record_dir=str(tmp_path),
        interval_s=0.05,
        pss_interval_s=0.3,
        output="capture",
    )
    assert run.wait(60)["exit"]["cause"] == "ok"
    text = render_html(run.record_path)
    assert "no output recorded" in text
    assert '"name":"memscope-chart"' in text


def test_output_lines():
    # \r redraws collapse; a pending \r survives a chunk boundary; ANSI colours go; \r\n ends a line.
    assert output_lines([("stdout", "bar 1\r"), ("stdout", "bar 2\r"), ("stdout", "\x1b[31mred\x1b[0m\r\n")]) == ["red"]
    # Streams are assembled apart: stderr does not split a stdout line.
    assert output_lines([("stdout", "x"), ("stderr", "e1\n"), ("stdout", "y\n")]) == ["e1", "xy"]
    # An unfinished line goes where it was last written.
    assert output_lines([("stdout", "a\n\rstep 1"), ("stderr", "Trace\nErr\n"), ("stdout", "\rstep 2")]) == [
        "a",
        "Trace",
        "Err",
        "step 2",
    ]
    assert output_lines([("stdout", "a\n\rstep 1"), ("stderr", "Trace\nErr\n")]) == ["a", "step 1", "Trace", "Err"]
    # The last 200 lines, the unfinished one included.
    many = "".join(f"l{i}\n" for i in range(300))
    assert output_lines([("stdout", many + "end")]) == [f"l{i}" for i in range(101, 300)] + ["end"]
    assert output_lines([("stdout", "early"), ("stderr", many)]) == [f"l{i}" for i in range(100, 300)]
    assert output_lines([]) == []
    long = output_lines([("stdout", "z" * 10_000 + "\n")])
    assert len(long) == 1 and long[0].startswith("z" * 4000) and "more chars" in long[0]


def test_memory_figure_hides_lines_that_dwarf_the_run():
    gib, mib = 2**30, 2**20
    snap = {
        "tree_pss_by_role": {
            "main": {"t": [0, 1, 2], "y": [10 * mib, 20 * mib, 30 * mib]},
            "dataloader_worker": {"t": [0, 1, 2], "y": [0, 5 * mib, 5 * mib]},
        },
        "main_rss": {"t": [0, 1, 2], "y": [12 * mib, 22 * mib, 33 * mib]},
        "tree_rss": {"t": [], "y": []},
        "host_available": {"t": [0, 2], "y": [60 * gib, 60 * gib]},
        "limit": {"t": [0, 2], "y": [100 * mib, 100 * mib]},
    }
    fig = memory_figure(snap, [{"name": "train", "start_s": 0.5, "end_s": 1.5}])
    names = {r.name for r in fig.renderers}
    assert {"pss:main", "pss:dataloader_worker", "main RSS", "host available", "limit"} <= names
    assert "tree RSS (sum)" not in names
    assert hidden_lines(fig) == ["host available"]
    legend = [item.label.value for item in fig.legend[0].items]
    assert legend[:2] == ["dataloader_worker", "main"]
    empty = memory_figure({})
    assert hidden_lines(empty) == [] and not [r for r in empty.renderers]


def test_report_of_a_running_run_says_running(start, record_dir, tmp_path):
    """Issue 23: `memscope report` (text and --html) of a run still going says "running", not "unknown — the
    record ends without an exit"; once it has ended, its real cause."""
    import subprocess

    from conftest import PY, script, wait_for_output

    live = start([script("sleeper.py"), "30"])
    wait_for_output(live, "ready")
    cli = [PY, "-m", "memscope.cli", "report", live.run_id, "--record", record_dir]
    try:
        deadline = time.time() + 20  # the record's first round gives the root's start time
        while True:
            text = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            if text.stdout.startswith("memscope: running") or time.time() > deadline:
                break
            time.sleep(0.3)
        assert text.returncode == 0, text.stderr
        assert text.stdout.startswith("memscope: running"), text.stdout
        assert "ends without an exit" not in text.stdout, text.stdout
        page = tmp_path / "live.html"
        p = subprocess.run([*cli, "--html", str(page)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        body = page.read_text()
        assert "<title>memscope " in body and ": running</title>" in body
        assert "still going" in body and "ends without an exit" not in body
    finally:
        live.kill()
    live.wait(30)
    p = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("memscope: ") and not p.stdout.startswith("memscope: running"), p.stdout
