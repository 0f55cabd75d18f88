"""Capture mode: the run's output read linearly, decoded whole, one line bounded."""

import collections
import time

from conftest import script

from memscope.collect.output import MAX_LINE, LineReader
from memscope.record.reader import RunData


def _reader(max_line=MAX_LINE):
    tail, texts = collections.deque(maxlen=50), []
    return LineReader(texts.append, tail, max_line), tail, texts


def test_a_character_split_across_reads_decodes_whole():
    r, tail, texts = _reader()
    data = "naïve 日本 ✓ end\n".encode()
    for i in range(len(data)):  # one byte a read: every multibyte character is split
        r.feed(data[i : i + 1])
    r.feed(b"", final=True)
    assert list(tail) == ["naïve 日本 ✓ end"]
    assert "".join(texts) == "naïve 日本 ✓ end\n" and "\ufffd" not in "".join(texts)


def test_an_overlong_line_is_cut_and_says_so_and_a_progress_bar_is_not():
    r, tail, texts = _reader(max_line=1000)
    for _ in range(50):
        r.feed(b"y" * 300)
    r.feed(b"\nnext\n")
    assert tail[0].startswith("y" * 1000 + " [memscope: line cut at") and "14000 more characters" in tail[0]
    assert tail[1] == "next"
    assert sum(len(t) for t in texts) < 1200  # the record holds the kept part and the note, not 15000 chars
    for i in range(500):  # tqdm-style redraws: 500 states, each short
        r.feed(f"\r{i:4d}/500 [{'#' * (i // 50)}]".encode())
        assert len(r.partial) < 30
    r.feed(b"\r\n")
    assert tail[-1] == " 499/500 [#########]"


def test_a_40_mib_line_does_not_stall_the_run(start):
    t0 = time.monotonic()
    run = start([script("long_line.py")])
    s = run.wait(30)
    elapsed = time.monotonic() - t0
    assert s["exit"]["cause"] == "ok", s["exit"]
    lines = list(run.output_tail)
    assert lines[0].startswith("x" * 1000) and "line cut at 64 KiB" in lines[0] and len(lines[0]) < MAX_LINE + 200
    assert "split \u00e9 done" in lines and not any("\ufffd" in x for x in lines)
    wrote = float(next(x for x in lines if x.startswith("wrote in")).split()[2])
    assert wrote < 2.0, lines  # the child was not held up by memscope's reading
    assert elapsed < 5.0  # start, 40 MiB, summary (about 1 s here)
    rd = RunData(s["record"])
    try:
        recorded = "".join(e["data"]["text"] for e in rd.events("output"))
    finally:
        rd.close()
    assert len(recorded) < 2 * MAX_LINE and "split \u00e9 done" in recorded
