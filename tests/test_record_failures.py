"""When the record cannot be written: said once, the summary still true, nothing left behind."""

import json
import os
import subprocess
import time

import pytest
from conftest import PY, script

MEMSCOPE = [PY, "-m", "memscope.cli"]


@pytest.fixture
def tiny_fs(tmp_path):
    """A 2 MiB tmpfs (needs root; skipped elsewhere), unmounted at the end whatever happens."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path):
    """Take every free byte of the file system ``path`` is on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_disk_full_is_said_once_and_the_exit_stays_true(tiny_fs, tmp_path):
    go = tmp_path / "go"
    out = tmp_path / "s.json"
    p = subprocess.Popen(
        [
            *MEMSCOPE,
            "run",
            "--quiet",
            "--interval",
            "0.02",
            "--record",
            str(tiny_fs),
            "--summary-json",
            str(out),
            script("wait_for_file.py"),
            str(go),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        _fill(tiny_fs / "filler")
        time.sleep(1.5)  # samples keep coming; the file takes none of them
        go.touch()
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stderr
    said = [line for line in stderr.splitlines() if "cannot write the record" in line]
    assert len(said) == 1 and "full" in said[0], stderr
    s = json.loads(out.read_text())
    assert s["exit"]["cause"] == "ok" and s["exit"]["code"] == 0, s["exit"]  # not "unknown"
    err = s["record_errors"]
    assert err["lost_records"] > 10 and "full" in err["first_error"], err
    assert s["duration_s"] > 1.5 and s["peak"]["tree_rss_bytes"] > 16 << 20
    assert [f for f in os.listdir(tmp_path) if f.startswith(".memscope-")] == []


def test_a_summary_path_that_cannot_be_written_leaves_nothing_behind(tmp_path):
    tmp = tmp_path / "tmp"  # memscope's own temporary directories would go here
    tmp.mkdir()
    runs = tmp_path / "runs"
    p = subprocess.run(
        [
            *MEMSCOPE,
            "run",
            "--quiet",
            "--record",
            str(runs),
            "--summary-json",
            str(tmp_path),
            script("clean.py"),
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TMPDIR=str(tmp)),
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "is a directory" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["tmp"] and os.listdir(tmp) == []


def test_what_a_full_disk_refuses_is_kept_bounded_with_its_peak(tiny_fs, monkeypatch):
    from memscope.model import Event, ProcessSeen, ProcMem, TreeSample
    from memscope.record import reader
    from memscope.record import writer as store

    monkeypatch.setattr(store, "KEEP_SAMPLES", 50)
    lines = []
    rec = store.Recorder(str(tiny_fs / "r.sqlite"), warn=lines.append)
    rec.begin("r", ["x"], "/", "now", 0.0, 7, {})
    rec.put(ProcessSeen(0.0, 7, 1, "main", "x", "x", 0.0))
    assert rec.sync()
    _fill(tiny_fs / "filler")
    for i in range(400):  # the peak, 900 MiB, comes early and must survive the ring
        rec.put(TreeSample(i * 0.1, "rss", (ProcMem(7, (900 if i == 20 else 100 + i % 7) << 20),)))
        if i % 40 == 0:
            assert rec.sync()  # one commit every 40 rounds, each refused
    rec.put(Event(40.0, 7, "exit_status", {"returncode": 0}))
    assert rec.sync()
    assert len(lines) == 1 and "full" in lines[0]
    assert rec.lost_records >= 400
    rd = reader.RunData(rec.path, rec.memory_copy())
    try:
        rounds = rd.con.execute("SELECT COUNT(DISTINCT t) FROM samples").fetchone()[0]
        assert rounds <= 51 + 40  # the last 50, the peak, and what reached the file before it filled
        assert rd.tree_peak(store.KIND_RSS)[1] == 900 << 20
        assert rd.events("exit_status")[0]["data"]["returncode"] == 0
    finally:
        rd.close()
    rec.close()
