"""The agent inside the run: loaded everywhere, stdlib only, harmless when the collector is gone."""

import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import PY, script, wait_for_output

from memscope.agent import protocol
from memscope.session.options import AGENT_SITE


def test_existing_sitecustomize_still_runs_and_agent_says_hello(start, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "chained"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    run = start([script("clean.py"), "0.3"], env=env)
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok"
    assert marker.read_text() == "yes"
    from memscope.record.reader import RunData

    hellos = RunData(s["record"]).events("agent_hello")
    assert [h["pid"] for h in hellos] == [run.pid]
    assert hellos[0]["data"]["runs_script"] is True


def test_training_goes_on_when_the_collector_dies(start):
    code = "import time\nfor i in range(30):\n    print('step', i, flush=True)\n    time.sleep(0.05)\n"
    run = start([PY, "-c", code])
    wait_for_output(run, "step 2")
    run._server.close()  # the agent's socket goes away mid-run
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok"
    assert "step 29" in run.output_tail


def test_a_connection_without_the_token_is_dropped(start):
    run = start([script("sleeper.py")])
    wait_for_output(run, "ready")
    c = socket.socket(socket.AF_UNIX)
    c.connect(run._server.path)
    c.sendall(b'{"t":"hello","token":"wrong","pid":1}\n{"t":"exception","type":"Forged"}\n')
    time.sleep(0.5)
    assert run._server.rejected == 1
    # Only memscope may list or write its directory; as root, anyone may reach the socket (a run that switches
    # user), and the token is the key.
    assert os.stat(os.path.dirname(run._server.path)).st_mode & 0o777 == (0o711 if os.geteuid() == 0 else 0o700)
    run.kill()
    from memscope.record.reader import RunData

    assert not RunData(run.summary()["record"]).events("agent_exception")


def test_agent_imports_only_the_standard_library(tmp_path):
    code = "import sys, json; print(json.dumps(sorted(sys.modules)))"
    agent_env = {
        protocol.ENV_SOCK: str(tmp_path / "none.sock"),
        protocol.ENV_TOKEN: "t",
        protocol.ENV_DIR: str(tmp_path),
    }
    plain = dict(os.environ, PYTHONPATH=AGENT_SITE)
    with_agent = dict(plain, **agent_env)
    mods = []
    for env in (plain, with_agent):
        out = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        mods.append(set(__import__("json").loads(out.stdout)))
    added = mods[1] - mods[0]
    assert "_memscope_agent" in added
    foreign = [
        m for m in added if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("_memscope_agent")
    ]
    assert foreign == []


def test_the_agent_starts_without_heavy_imports(tmp_path):
    # Issue 22 #10: the agent runs in every Python process of a run, so what it imports at start is paid by each
    # (traceback + linecache + tokenize and importlib.abc were ~25 ms of a 30 ms start). They are imported when
    # needed: an exception to save, never at start. Checked with the agent connected to a real server.
    from memscope.collect.server import AgentServer

    got = []
    srv = AgentServer(str(tmp_path / "a.sock"), "t", lambda pid, msg: got.append(msg))
    srv.start()
    try:
        code = "import sys; print(' '.join(sorted(sys.modules)))"
        plain = dict(os.environ, PYTHONPATH=AGENT_SITE)
        with_agent = dict(
            plain, **{protocol.ENV_SOCK: srv.path, protocol.ENV_TOKEN: "t", protocol.ENV_DIR: str(tmp_path)}
        )
        mods = []
        for env in (plain, with_agent):
            out = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            mods.append(set(out.stdout.split()))
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [m["t"] for m in got][:1] == ["hello"]  # it did start, connected
        heavy = {"traceback", "linecache", "tokenize", "importlib.abc", "importlib.resources", "typing", "inspect"}
        heavy |= {"tempfile", "ctypes", "dis", "email", "logging", "subprocess", "asyncio"}
        assert sorted((mods[1] - mods[0]) & heavy) == []
    finally:
        srv.close()


def test_without_the_agent_the_tree_is_still_sampled(start):
    run = start([script("clean.py"), "0.6"], agent=False)
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok" and s["peak"]["tree_rss_bytes"] > 64 << 20


def test_a_full_socket_never_cuts_a_line(tmp_path):
    # The collector falls behind and a message is larger than the socket buffer: the kernel takes part of it.
    # The rest must be finished before anything else is sent, so the collector only ever sees whole lines.
    import json as _json
    import socket as _socket

    from memscope.agent.channel import Channel

    srv = _socket.socket(_socket.AF_UNIX)
    path = str(tmp_path / "s.sock")
    srv.bind(path)
    srv.listen(1)
    ch = Channel(path, "tok")
    ch.connect({"pid": 1})
    conn, _ = srv.accept()
    cut = []
    send_some = ch._send_some

    def spy(data):
        n = send_some(data)
        if 0 < n < len(data):
            cut.append(n)
        return n

    ch._send_some = spy
    sent = sum(ch.send({"t": "x", "i": i, "pad": "y" * 300_000}) for i in range(20))
    assert cut, "no message was cut: the test did not reach its case"
    assert ch.dropped > 0 and sent < 20  # dropped whole, never blocked
    conn.setblocking(False)
    data = b""
    for _ in range(400):
        try:
            data += conn.recv(1 << 20)
        except BlockingIOError:
            ch.send({"t": "x", "i": -1})  # gives the pending tail its chance
    lines = [line for line in data.split(b"\n") if line]
    assert len(lines) >= 3
    assert all(isinstance(_json.loads(line), dict) for line in lines)


def _nobody_runs_the_agent() -> bool:
    """Root, runuser, a Python the user nobody may run, and memscope's agent readable by it."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        return False
    check = f"import os, sys; sys.exit(not os.access({os.path.join(AGENT_SITE, 'sitecustomize.py')!r}, os.R_OK))"
    try:
        p = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", check], cwd="/", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0


@pytest.mark.skipif(not _nobody_runs_the_agent(), reason="needs root, runuser and a Python the user nobody can run")
def test_a_run_that_switches_user_still_reaches_memscope(start):
    # Issue 22 point 14: memscope as root, the training under runuser -u nobody. Its agent loaded but could not
    # reach the socket (memscope's private directory): "no agent loaded" and no exception. The socket is
    # reachable now (the token is the key), and the exception travels over it (no crash file can be written).
    code = "import os; print('uid', os.getuid(), flush=True); raise ValueError('boom')"
    run = start(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", code], cwd="/")
    s = run.wait(60)
    from memscope.record.reader import RunData

    main = next(p["pid"] for p in s["processes"] if p["cmdline"].startswith("/usr/bin/python3"))
    assert "uid 65534" in run.output_tail
    assert main in {h["pid"] for h in RunData(s["record"]).events("agent_hello")}, s["exit"]
    assert s["exit"]["cause"] == "exception" and "ValueError: boom" in s["exit"]["message"], s["exit"]
    assert s["exit"]["pid"] == main
