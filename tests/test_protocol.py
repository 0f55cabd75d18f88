"""The agent protocol through the real socket: a closed set of kinds, refused forgeries, untrusted connections
bounded in number and time, and a recorder that outlives any record."""

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import time

from conftest import PY, script, wait_for_output

from memscope.collect import server as server_mod
from memscope.collect.server import AgentServer
from memscope.model import Event, ProcessSeen, ProcMem, TreeSample
from memscope.record.reader import RunData
from memscope.record.writer import Recorder

MEMSCOPE = [PY, "-m", "memscope.cli"]


def test_forged_kinds_are_refused_and_the_exit_stays_true(start):
    run = start([script("forge_messages.py")])
    wait_for_output(run, "forged sent")
    assert "forged sent True True True" in list(run.output_tail)  # NaN, a bad hello, garbage: each closed
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok" and s["exit"]["traceback"] is None, s["exit"]
    rd = RunData(s["record"])
    try:
        kinds = {e["kind"] for e in rd.events()}
        assert not kinds & {"__sql__", "__barrier__", "fault", "exit_status_forged"}
        assert len(rd.events("exit_status")) == 1 and rd.events("exit_status")[0]["data"]["returncode"] == 0
        assert rd.con.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > 0  # no DROP TABLE ran
        marks = [e["data"]["text"] for e in rd.events("mark")]
        assert marks == ["still heard"]
        assert not rd.events("agent_exception")
    finally:
        rd.close()
    err = s["record_errors"]
    assert err["refused_messages"] == 16, err  # every forged or ill-typed line after the hello
    assert err["rejected_connections"] >= 1 and err["bad_records"] == 0
    # Issue 22 #8: the ill-typed probe messages were dropped at the socket; the well-typed one is summarized, and
    # nothing else was lost: the exit cause, the peaks, every section.
    assert s["unavailable"] == {}, s["unavailable"]
    assert s["peak"]["tree_rss_bytes"] > 0 and s["processes"]
    assert [r["in_use_bytes"] for r in s["malloc"]["processes"]] == [5 << 20]
    assert s["loads"] == [] and s["faiss"]["indexes"] == []
    rep = subprocess.run(MEMSCOPE + ["report", s["record"], "--json"], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["exit"]["cause"] == "ok"


def test_a_record_holding_ill_typed_events_still_has_a_summary_and_a_report(start, tmp_path):
    # Defence in depth (issue 22 #8): events the collector would refuse today, in a record written before (or by
    # anything else): each breaks only its own section, named in ``unavailable``; the exit cause and the peaks
    # stand, and ``memscope report`` renders it.
    run = start([script("clean.py"), "0.3"])
    s0 = run.wait(60)
    path = str(tmp_path / "bad.sqlite")
    shutil.copy(s0["record"], path)
    bad = [
        ("malloc", {"in_use_bytes": "lots", "free_held_bytes": 1}),
        ("np_read", {"id": "1-1", "key": "x", "reads": 1, "path": "/d.npz", "duration_s": "slow"}),
        ("np_load", {"ev": "open", "id": "1-2", "path": ["a", "list"], "kind": "npy", "nbytes": 8}),
        ("faiss_index", {"ev": "new", "id": "1-3", "type": "IndexFlatL2", "d": 8, "ntotal": 1, "est_bytes": "big"}),
        ("phase", {"name": "x", "state": "start", "auto": "yes"}),
        ("phase", {"name": ["x"], "state": "end"}),
    ]
    con = sqlite3.connect(path)
    con.executemany(
        "INSERT INTO events (t, pid, kind, data) VALUES (?, ?, ?, ?)",
        [(0.1, run.pid, kind, json.dumps(data)) for kind, data in bad],
    )
    con.execute("UPDATE run SET summary=NULL")
    con.commit()
    con.close()
    rep = subprocess.run(MEMSCOPE + ["report", path, "--json"], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    s = json.loads(rep.stdout)
    assert s["exit"]["cause"] == "ok" and s["exit"]["code"] == 0, s["exit"]
    assert s["peak"] == s0["peak"] and len(s["processes"]) == len(s0["processes"])
    assert {"malloc", "loads", "faiss"} <= set(s["unavailable"]), s["unavailable"]
    assert s["malloc"]["processes"] == [] and s["loads"] == [] and s["faiss"]["indexes"] == []
    html = tmp_path / "bad.html"
    rep = subprocess.run(MEMSCOPE + ["report", path, "--html", str(html)], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert html.stat().st_size > 1000


def _server(tmp_path, got):
    srv = AgentServer(str(tmp_path / "a.sock"), "tok", lambda pid, msg: got.append((pid, msg)))
    srv.start()
    return srv


def _connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(5)
    return s


def _heard(got, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(got) >= n


def test_silent_connections_never_lock_out_an_agent(tmp_path, monkeypatch):
    # Issue 22 #15: 32 silent connections used to fill a fixed cap and every agent after them was refused.
    monkeypatch.setattr(server_mod, "HELLO_TIMEOUT_S", 1.5)
    got = []
    srv = _server(tmp_path, got)
    try:
        t_open = time.monotonic()
        idle = [_connect(srv.path) for _ in range(100)]
        deadline = time.monotonic() + 5
        while len(srv._pending) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(srv._pending) == 100  # all held, none refused
        ok = _connect(srv.path)
        ok.sendall(b'{"t":"hello","token":"tok","pid":4242}\n{"t":"mark","text":"hi"}\n')
        assert _heard(got, 2, timeout=1.0)  # heard at once, not after the silent ones time out
        # Named by the kernel (SO_PEERCRED): this test's own pid, not the one the hello claims.
        assert [m["t"] for _, m in got] == ["hello", "mark"] and got[1][0] == os.getpid()
        assert all(c.recv(1) == b"" for c in idle)  # the silent ones go after the hello timeout
        assert 1.4 < time.monotonic() - t_open < 4.0
        assert srv.rejected >= 100 and srv.connections == 1
        for s in idle + [ok]:
            s.close()
    finally:
        srv.close()


def test_a_process_holding_silent_connections_does_not_blind_the_training(start):
    # Issue 22 #15 on real processes: a helper of the run holds 64 silent connections (reopened as fast as they
    # are dropped) while the training starts; the training's agent says hello and its phase and mark are heard.
    run = start([script("holds_connections.py"), "64"])
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok", s["exit"]
    rd = RunData(s["record"])
    try:
        hellos = {e["pid"] for e in rd.events("agent_hello")}
        marks = [(e["pid"], e["data"]["text"]) for e in rd.events("mark")]
        phases = [e["data"]["name"] for e in rd.events("phase")]
    finally:
        rd.close()
    child = [pid for pid, text in marks if text == "child heard"]
    assert len(child) == 1 and child[0] in hellos and child[0] != run.pid, (marks, hellos)
    assert phases == ["blinded", "blinded"]


def test_out_of_descriptors_a_silent_connection_makes_room(tmp_path, monkeypatch):
    got = []
    srv = _server(tmp_path, got)
    srv._max_conns = 12  # what a process near its descriptor limit can spare (the listener counts as one)
    try:
        idle = [_connect(srv.path) for _ in range(30)]
        time.sleep(0.3)
        assert len(srv._pending) <= 11
        ok = _connect(srv.path)
        ok.sendall(b'{"t":"hello","token":"tok","pid":4242}\n{"t":"mark","text":"hi"}\n')
        assert _heard(got, 2, timeout=1.0)
        assert idle[0].recv(1) == b""  # the oldest silent ones were dropped for it
        for s in idle + [ok]:
            s.close()
    finally:
        srv.close()


def test_what_silent_connections_buffer_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "PENDING_BYTES", 1 << 20)
    got = []
    srv = _server(tmp_path, got)
    try:
        conns = [_connect(srv.path) for _ in range(4)]
        for c in conns:
            try:
                c.sendall(b"x" * (400 << 10))  # no newline: a hello that never ends
            except OSError:  # dropped while sending: what the bound is for
                pass
        time.sleep(0.5)
        assert len(srv._pending) < 4 and srv.rejected >= 1
        assert sum(len(srv._sel.get_key(c).data["buf"]) for c in srv._pending) <= 1 << 20
        for c in conns:
            c.close()
    finally:
        srv.close()


def test_garbage_or_a_wrong_token_closes_the_connection(tmp_path):
    got = []
    srv = _server(tmp_path, got)
    try:
        for payload in (
            b"\x00\xff garbage\n",
            b'{"t":"hello","token":"nope","pid":5}\n',
            b"[1,2]\n",
            b'{"t":"mark","text":"before hello"}\n',
            b'{"t":"hello","token":"tok","pid":0}\n',
            b'{"t":"hello","token":"t\xc3\xa9","pid":5}\n',
        ):
            c = _connect(srv.path)
            c.sendall(payload)
            assert c.recv(1) == b"", payload
            c.close()
        c = _connect(srv.path)
        c.sendall(b'{"t":"hello","token":"tok","pid":77}\n{"t":"mark","text":"ok"}\nnot json\n')
        assert c.recv(1) == b""
        assert [m["t"] for _, m in got] == ["hello", "mark"]
    finally:
        srv.close()


def test_the_recorder_survives_records_it_cannot_store(tmp_path):
    path = str(tmp_path / "r.sqlite")
    lines = []
    rec = Recorder(path, warn=lines.append)
    rec.begin("r", ["x"], "/", "now", 0.0, 1, {})
    rec.put(ProcessSeen(0.1, 2**70, 1, "main", "x", "x", 0.0))  # too big for SQLite
    rec.put(TreeSample(0.2, "rss", (ProcMem(2**80, 1),)))
    rec.put(Event(0.3, None, "note", {"obj": object()}))  # stored as its repr
    rec.put(ProcessSeen(0.4, 12, 1, "main", "x", "x", 0.0))
    try:
        rec.put("__barrier__")  # not a record: refused at the door
        raise AssertionError("put accepted a string")
    except TypeError:
        pass
    assert rec.sync(5)
    rec.close()
    assert rec.bad_records == 2 and rec.lost_records == 0 and not lines
    rd = RunData(path)
    try:
        assert [p["pid"] for p in rd.processes()] == [12]
        assert len(rd.events("note")) == 1
    finally:
        rd.close()


def test_what_the_agent_sends_passes_and_near_misses_do_not():
    from memscope.collect.messages import Refused, validate

    ok = [
        {
            "t": "hello",
            "pid": 4000,
            "ppid": 1,
            "argv": ["train.py"] * 5000,
            "orig_argv": [],
            "executable": None,
            "runs_script": True,
            "forked": False,
            "rank": "1",
        },
        {"t": "role", "role": "dataloader_worker", "pid": 4001},
        {
            "t": "exception",
            "type": "ValueError",
            "module": "builtins",
            "message": "m",
            "traceback": "tb",
            "pid": 4000,
            "wall": 1.5,
            "rank": None,
            "how": "at exit",
        },
        {"t": "phase", "name": "train", "state": "switch", "auto": True, "pid": 4000, "wall": 2.0},
        {"t": "epoch", "loader": 140234, "n": 2, "workers": 4, "pid": 4000, "wall": 3.0},
        {"t": "torch_alloc", "backend": "cuda", "device": 0, "allocated": 1 << 40, "pid": 4000},
        {"t": "np_load", "ev": "open", "id": "1", "path": "<BytesIO>", "members": [["a", 8, False]]},
        {"t": "census", "id": "ab12", "tensors": [{"device": "cpu", "shape": [3, 4], "bytes": 48}]},
        {"t": "malloc", "in_use_bytes": 5, "free_held_bytes": 6, "pid": 4000},
    ]
    for msg in ok:
        assert validate(msg) is msg
    bad = [
        {"t": "fault", "text": "x"},
        {"t": "exit_status", "returncode": 0},
        {"t": "__sql__"},
        {"t": None},
        {"t": "role", "role": "main", "pid": 0},
        {"t": "role", "role": "main", "pid": True},
        {"t": "role", "role": "main", "pid": (1 << 22) + 1},
        {"t": "mark", "text": "x", "extra": 1},
        {"t": "phase", "name": "x", "state": "start", "auto": 1},
        {"t": "mark"},
        {"t": "malloc", "x": [[[[[[[1]]]]]]]},
        {"t": "malloc", "x": float("nan")},
        {"t": "torch_alloc", "backend": "cuda", "device": 0, "allocated": 1 << 64},
        {"t": "malloc", "in_use_bytes": "lots"},
        {"t": "malloc", "in_use_bytes": -1},
        {"t": "np_read", "id": "1", "duration_s": "slow"},
        {"t": "np_load", "ev": "open", "id": "1", "path": ["a"]},
        {"t": "np_load", "ev": "open", "id": "1", "members": [["a", "8", False]]},
        {"t": "faiss_index", "ev": "new", "id": "1", "est_bytes": "big"},
        {"t": "census", "id": "ab12", "tensors": [{"device": "cpu", "shape": "3x4", "bytes": 48}]},
    ]
    for msg in bad:
        try:
            validate(msg)
        except Refused:
            continue
        raise AssertionError(f"accepted {msg}")
