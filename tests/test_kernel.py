"""Level 1: a real kernel (jupyter_client). %memscope returns at once, widget updates keep coming while the
kernel is idle, and a Stop click sent the way the browser sends it stops the run."""
import os
import queue
import time

import pytest

from conftest import script

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")


@pytest.fixture
def kernel(tmp_path):
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    yield kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def execute(kc, code, timeout=60):
    """Run code; return (reply, iopub messages until idle)."""
    msg_id = kc.execute(code)
    msgs = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = kc.get_iopub_msg(timeout=deadline - time.monotonic())
        msgs.append(m)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status" \
                and m["content"]["execution_state"] == "idle":
            break
    return kc.get_shell_msg(timeout=10), msgs


def drain(kc, seconds):
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            out.append(kc.get_iopub_msg(timeout=max(0.01, end - time.monotonic())))
        except queue.Empty:
            break
    return out


def widget_updates(msgs):
    return [m for m in msgs if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"]


def test_magic_streams_while_idle_and_stop_click_stops_the_run(kernel, tmp_path):
    kc = kernel
    t0 = time.monotonic()
    reply, msgs = execute(kc, f"%load_ext memscope\nrun = %memscope --record {tmp_path}/runs {script('sleeper.py')} 64")
    assert reply["content"]["status"] == "ok"
    assert time.monotonic() - t0 < 15  # the cell returns while the run goes on
    opens = [m for m in msgs if m["msg_type"] == "comm_open"]
    controls = [m["content"]["comm_id"] for m in opens
                if "ack" in m["content"]["data"].get("state", {})]
    assert len(controls) == 1
    # The kernel is idle now; the dashboard keeps sending updates.
    idle_msgs = drain(kc, 3.0)
    updates = widget_updates(idle_msgs)
    assert len(updates) >= 4, [m["msg_type"] for m in idle_msgs]
    assert len(updates) <= 3.0 * 4 * 5 + 5  # at most 4 pushes a second (a push updates a few widgets)
    charts = [m["content"]["data"]["state"]["data"] for m in updates if "data" in m["content"]["data"]["state"]]
    assert charts, "no chart update"
    last = charts[-1]
    assert "main" in last["tree_pss_by_role"] and len(last["main_rss"]["t"]) >= 5
    assert max(last["main_rss"]["y"]) > 64 << 20  # the sleeper holds 64 MiB
    # Tensor census, clicked while the kernel is idle: the census panel fills in (the sleeper has no torch, so
    # it counts Python objects only).
    kc.session.send(kc.shell_channel.socket, "comm_msg", {
        "comm_id": controls[0], "data": {"method": "custom", "content": {"action": "census", "clicks": 1}}})
    after = drain(kc, 6.0)
    texts = " ".join(str(m["content"].get("data", {}).get("state", {})) for m in widget_updates(after))
    assert "Tensor census</b> of pid" in texts and "census taken in" in texts
    # Click Stop as the browser does: a custom message on the Controls comm.
    kc.session.send(kc.shell_channel.socket, "comm_msg", {
        "comm_id": controls[0], "data": {"method": "custom", "content": {"action": "stop", "clicks": 1}}})
    after = drain(kc, 8.0)
    texts = " ".join(str(m["content"].get("data", {}).get("state", {})) for m in widget_updates(after))
    assert "stopped_by_user" in texts  # the verdict card
    reply, msgs = execute(kc, "print(run.summary()['exit']['cause'], run.status)")
    out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
    assert "stopped_by_user ended" in out


def test_bad_magic_input_is_one_line(kernel, tmp_path):
    reply, msgs = execute(kernel, "%load_ext memscope\nr = %memscope missing_script.py\nprint('r is', r)")
    assert reply["content"]["status"] == "ok"
    streams = [m["content"]["text"] for m in msgs if m["msg_type"] == "stream"]
    assert "memscope: missing_script.py: no such file" in "".join(streams)
    assert "r is None" in "".join(streams)
    assert not [m for m in msgs if m["msg_type"] == "error"]


def test_cell_magic_runs_the_body_in_the_notebook_directory(kernel, tmp_path):
    code = ("%%memscope --record runs\n"
            "import os\n"
            "buf = bytearray(32 << 20)\n"
            "print('cwd', os.getcwd())\n"
            "raise RuntimeError('from the cell body')\n")
    reply, _ = execute(kernel, "%load_ext memscope")
    reply, msgs = execute(kernel, code)
    assert reply["content"]["status"] == "ok"
    reply, msgs = execute(kernel, "import memscope.ui.dashboard as D\ns = D.last.run.wait(60)\n"
                                  "print(s['exit']['cause'], '|', s['exit']['message'])\n"
                                  "print(list(D.last.run.output_tail))")
    out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
    assert "exception | RuntimeError: from the cell body" in out
    assert f"cwd {tmp_path}" in out
    assert (tmp_path / "runs").is_dir()


def test_terminal_ipython_gets_text_not_widgets(tmp_path):
    import subprocess
    import sys

    code = (f"%load_ext memscope\nr = %memscope --record {tmp_path} {script('clean.py')} 0.3\n"
            "s = r.wait(60)\nimport time; time.sleep(0.5)\nprint('CAUSE', s['exit']['cause'])")
    (tmp_path / "t.ipy").write_text(code)
    p = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(tmp_path / "t.ipy")],
                       capture_output=True, text=True, timeout=120)
    assert "CAUSE ok" in p.stdout, p.stdout + p.stderr
    assert "memscope: started" in p.stderr and "memscope: ok" in p.stderr
    assert "VBox" not in p.stdout + p.stderr


def test_rerunning_a_cell_retires_its_old_dashboard(kernel, tmp_path):
    """Re-running the cell (same cellId) closes the dashboard it showed before: no thread keeps writing into old
    widgets, and the new run gets a dashboard of its own."""
    kc = kernel
    execute(kc, "%load_ext memscope\nimport memscope.ui.dashboard as D")
    cell = f"run = %memscope --record {tmp_path}/runs {script('sleeper.py')} 8"
    for _ in range(2):
        msg = kc.session.msg("execute_request", {"code": cell, "silent": False, "store_history": True,
                                                 "user_expressions": {}, "allow_stdin": False,
                                                 "stop_on_error": True}, metadata={"cellId": "cell-1"})
        kc.shell_channel.send(msg)
        kc.get_shell_msg(timeout=60)
        if _ == 0:
            execute(kc, "first, first_run = D.last, run")
    time.sleep(1.0)
    reply, msgs = execute(kc, "second = D.last\n"
                              "print('RESULT', first is not second, first._closed.is_set(),"
                              " first._thread.is_alive(), second._thread.is_alive(), len(D._by_cell))\n"
                              "first_run.kill(); run.kill()")
    out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
    assert "RESULT True True False True 1" in out, out
