"""Level 1: a real kernel (jupyter_client). %memscope returns at once, widget updates keep coming while the
kernel is idle, and a Stop click sent the way the browser sends it stops the run."""

import os
import queue
import re
import time

import psutil
import pytest
from conftest import KERNEL, chart_lines_from_iopub, script

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")


@pytest.fixture
def kernel(tmp_path):
    km, kc = _start_kernel(tmp_path)
    yield kc
    _close(km, kc)


def _start_kernel(cwd):
    """A real python3 kernel in ``cwd``, ready: (manager, client)."""
    km = jupyter_client.KernelManager(kernel_name=KERNEL)
    km.start_kernel(cwd=str(cwd), env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
    except BaseException:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


# A kernel killed outright leaves its runs going (memscope never kills a training because its kernel died: the
# run can be attached again). A test that failed half-way must not leave its run behind on the machine: the
# kernel kills what it started, through memscope (its own tree only), before it goes.
_KILL_RUNS = (
    "import gc, memscope\n"
    "for _r in [o for o in gc.get_objects() if isinstance(o, memscope.Run)]:\n"
    "    _r.ended or _r.kill(wait=False)\n"
    "for _r in [o for o in gc.get_objects() if isinstance(o, memscope.Run)]:\n"
    "    _r.wait(10)"
)


def _close(km, kc):
    try:
        if km.is_alive():
            execute(kc, _KILL_RUNS, timeout=20)
    except Exception as exc:  # a kernel that cannot answer any more: say so, the test's own failure stands
        print(f"could not stop the kernel's runs: {exc!r}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc, code, timeout=60):
    """Run code; return (reply, iopub messages until idle)."""
    msg_id = kc.execute(code)
    msgs = _until_idle(kc, msg_id, timeout)
    return kc.get_shell_msg(timeout=10), msgs


def _until_idle(kc, msg_id, timeout):
    """The iopub messages until the kernel is idle after the request ``msg_id``."""
    msgs = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = kc.get_iopub_msg(timeout=deadline - time.monotonic())
        msgs.append(m)
        if (
            m["parent_header"].get("msg_id") == msg_id
            and m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
        ):
            break
    return msgs


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
    controls = [m["content"]["comm_id"] for m in opens if "ack" in m["content"]["data"].get("state", {})]
    assert len(controls) == 1
    # The kernel is idle now; the dashboard keeps sending updates.
    idle_msgs = drain(kc, 3.0)
    updates = widget_updates(idle_msgs)
    assert len(updates) >= 4, [m["msg_type"] for m in idle_msgs]
    assert len(updates) <= 3.0 * 4 * 5 + 5  # at most 4 pushes a second (a push updates a few widgets)
    lines = chart_lines_from_iopub(msgs + idle_msgs)  # the chart sends new points as custom messages
    assert lines, "no chart update"
    assert "role:main" in lines and len(lines["main_rss"][0]) >= 5
    assert max(lines["main_rss"][1]) > 64 << 20  # the sleeper holds 64 MiB
    # Tensor census, clicked while the kernel is idle: the census panel fills in (the sleeper has no torch, so
    # it counts Python objects only).
    for click in (1, 2):  # a second click while the first census runs starts no second one
        kc.session.send(
            kc.shell_channel.socket,
            "comm_msg",
            {"comm_id": controls[0], "data": {"method": "custom", "content": {"action": "census", "clicks": click}}},
        )
    after = drain(kc, 6.0)
    texts = " ".join(str(m["content"].get("data", {}).get("state", {})) for m in widget_updates(after))
    assert "Tensor census</b> of pid" in texts and "census taken in" in texts
    censuses = 1
    if "the census asked for before is still running" not in texts:
        # The first census had already ended (the sleeper's few objects count in milliseconds; seen in CI under
        # Colab's pins): then the second click started a census of its own, after it, not alongside, and the
        # summary records both.
        assert texts.count("counting the main process") == 2, texts
        censuses = 2
    assert "'census': 2" in texts  # the kernel acknowledged both clicks by their ids
    # Stacks: every process's stacks, shown under the buttons (escaped), in milliseconds.
    kc.session.send(
        kc.shell_channel.socket,
        "comm_msg",
        {"comm_id": controls[0], "data": {"method": "custom", "content": {"action": "stacks", "clicks": 1}}},
    )
    texts = " ".join(str(m["content"].get("data", {}).get("state", {})) for m in widget_updates(drain(kc, 3.0)))
    assert "stacks taken in" in texts and "<b>Stacks</b> the main process was in sleeper.py:" in texts, texts
    # Click Stop as the browser does: a custom message on the Controls comm.
    kc.session.send(
        kc.shell_channel.socket,
        "comm_msg",
        {"comm_id": controls[0], "data": {"method": "custom", "content": {"action": "stop", "clicks": 1}}},
    )
    after = drain(kc, 8.0)
    texts = " ".join(str(m["content"].get("data", {}).get("state", {})) for m in widget_updates(after))
    assert "stopped_by_user" in texts  # the verdict card
    reply, msgs = execute(kc, "print(run.summary()['exit']['cause'], run.status, len(run.summary()['census']))")
    out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
    assert f"stopped_by_user ended {censuses}" in out


def test_bad_magic_input_is_one_line(kernel, tmp_path):
    reply, msgs = execute(kernel, "%load_ext memscope\nr = %memscope missing_script.py\nprint('r is', r)")
    assert reply["content"]["status"] == "ok"
    streams = [m["content"]["text"] for m in msgs if m["msg_type"] == "stream"]
    assert "memscope: missing_script.py: no such file" in "".join(streams)
    assert "r is None" in "".join(streams)
    assert not [m for m in msgs if m["msg_type"] == "error"]


def test_cell_magic_runs_the_body_in_the_notebook_directory(kernel, tmp_path):
    code = (
        "%%memscope --record runs\n"
        "import os\n"
        "buf = bytearray(32 << 20)\n"
        "print('cwd', os.getcwd())\n"
        "raise RuntimeError('from the cell body')\n"
    )
    reply, _ = execute(kernel, "%load_ext memscope")
    reply, msgs = execute(kernel, code)
    assert reply["content"]["status"] == "ok"
    reply, msgs = execute(
        kernel,
        "import memscope.ui.dashboard as D\ns = D.last.run.wait(60)\n"
        "print(s['exit']['cause'], '|', s['exit']['message'])\n"
        "print(list(D.last.run.output_tail))",
    )
    out = "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")
    assert "exception | RuntimeError: from the cell body" in out
    assert f"cwd {tmp_path}" in out
    assert (tmp_path / "runs").is_dir()


def test_terminal_ipython_gets_text_not_widgets(tmp_path):
    import subprocess
    import sys

    code = (
        f"%load_ext memscope\nr = %memscope --record {tmp_path} {script('clean.py')} 0.3\n"
        "s = r.wait(60)\nimport time; time.sleep(0.5)\nprint('CAUSE', s['exit']['cause'])\n"
        "display(r)"  # no widgets here: a Run displayed keeps its one-line repr
    )
    (tmp_path / "t.ipy").write_text(code)
    p = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(tmp_path / "t.ipy")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "CAUSE ok" in p.stdout, p.stdout + p.stderr
    assert "memscope: started" in p.stderr and "memscope: ok" in p.stderr
    assert "VBox" not in p.stdout + p.stderr
    assert "<memscope.Run " in p.stdout and "widget-view" not in p.stdout, p.stdout


def _send_in_cell(kc, code, cell_id):
    """An execute_request as JupyterLab sends it: the cell's id in the metadata."""
    msg = kc.session.msg(
        "execute_request",
        {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        metadata={"cellId": cell_id},
    )
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _reply(kc, msg_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        m = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def _printed(msgs):
    return "".join(m["content"].get("text", "") for m in msgs if m["msg_type"] == "stream")


def test_a_run_outlives_its_killed_kernel_and_keeps_printing(tmp_path):
    """A kernel that dies (or is restarted) must not take the training along. Its output went to a pipe memscope
    read: the training's first print after the kernel's death raised BrokenPipeError and ended it. Now it writes
    to a file beside the record, finishes, and what it printed unwatched is there."""
    import glob

    km, kc = _start_kernel(tmp_path)
    done = tmp_path / "done"
    try:
        execute(
            kc, f"%load_ext memscope\nrun = %memscope --record {tmp_path}/runs {script('outlives_kernel.py')} {done} 5"
        )
        _, msgs = execute(kc, "import time; time.sleep(1.5); print('PID', run.pid)")
        pid = int(_printed(msgs).split("PID")[1].split()[0])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)  # SIGKILL: no atexit, no goodbye
    try:
        proc = psutil.Process(pid)
        proc.wait(30)
    except psutil.NoSuchProcess:
        pass
    assert done.read_text() == "finished"
    out = glob.glob(f"{tmp_path}/runs/*.stdout")
    assert len(out) == 1
    lines = open(out[0]).read().splitlines()
    assert lines[-1].startswith("done ") and len(lines) >= 15, lines


def test_rerunning_a_cell_closes_only_its_own_dashboard(kernel, tmp_path):
    """Re-running a %memscope cell (same cellId) closes the dashboard it showed before, and nothing else: a user
    widget made before and one made after, and another cell's dashboard, survive three re-runs; the old
    dashboards' threads (updater, subscriptions) are gone."""
    kc = kernel
    execute(
        kc,
        "%load_ext memscope\nimport threading, ipywidgets\nimport memscope.ui.dashboard as D\n"
        "before = ipywidgets.IntSlider(); display(before)",
    )
    long_run = f"%memscope --record {tmp_path}/runs {script('sleeper.py')} 8"
    _reply(kc, _send_in_cell(kc, f"other = {long_run}", "cell-other"))
    execute(kc, "other_dash = D.last\nafter = ipywidgets.IntSlider(); display(after)\nruns, dashes = [], []")
    for _ in range(4):  # the first run and three re-runs of the same cell
        _reply(kc, _send_in_cell(kc, f"run = {long_run}", "cell-1"))
        execute(kc, "runs.append(run); dashes.append(D.last)")
    _, msgs = execute(
        kc,
        """
def ours():
    return [t for t in threading.enumerate() if t.name in ("memscope-dashboard", "memscope-subscriber")]
import time
deadline = time.monotonic() + 5
while len(ours()) > 8 and time.monotonic() < deadline:  # two live dashboards: 1 updater + 3 subscriptions each
    time.sleep(0.1)
old = dashes[:-1]
print('SLIDERS', before.comm is not None, after.comm is not None)
print('OTHER', other_dash.chart.comm is not None, other_dash.controls.comm is not None, other_dash._thread.is_alive())
print('OLD', [d.chart.comm is None and d.controls.comm is None and d.widget.comm is None for d in old],
      [d._thread.is_alive() for d in old])
print('NEW', dashes[-1].controls.comm is not None, dashes[-1]._thread.is_alive())
print('THREADS', len([t for t in ours() if t.name == 'memscope-dashboard']), len(ours()), len(D._by_cell))
for r in runs + [other]:
    r.kill()
""",
    )
    out = _printed(msgs)
    assert "SLIDERS True True" in out, out
    assert "OTHER True True True" in out, out
    assert "OLD [True, True, True] [False, False, False]" in out, out
    assert "NEW True True" in out, out
    assert "THREADS 2 8 2" in out, out  # this cell's newest dashboard and the other cell's, nothing more
    # The kernel never told the browser to close the sliders or the other dashboard.
    closed = {m["content"]["comm_id"] for m in msgs if m["msg_type"] == "comm_close"}
    _, ids = execute(kc, "print('IDS', before.model_id, after.model_id, other_dash.controls.model_id)")
    assert not closed & set(_printed(ids).split()[1:4])


def _open_subshell(kc):
    """A subshell's id, or None where the kernel has none (ipykernel < 7: Colab's, Kaggle's, VS Code's)."""
    features = _reply(kc, kc.kernel_info(), 30)["content"].get("supported_features") or []
    if "kernel subshells" not in features:
        return None
    msg = kc.session.msg("create_subshell_request", {})
    kc.control_channel.send(msg)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = kc.control_channel.get_msg(timeout=30)
        if r["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return r["content"].get("subshell_id")


def _click(kc, comm_id, action, subshell_id=None):
    """A button click as the browser sends it; over a subshell as JupyterLab >= 4.4 sends comm messages."""
    msg = kc.session.msg(
        "comm_msg",
        {
            "comm_id": comm_id,
            "data": {"method": "custom", "content": {"action": action, "clicks": int(time.time() * 1000)}},
        },
    )
    if subshell_id:
        msg["header"]["subshell_id"] = subshell_id
    kc.shell_channel.send(msg)


def _gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # _alive: a process gone between two looks is gone (the pid_exists-then-status race failed CI once)
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _start_two_procs(kc, tmp_path):
    reply, msgs = execute(
        kc, f"%load_ext memscope\nrun = %memscope --record {tmp_path}/runs --grace 5 {script('two_procs.py')} 60"
    )
    assert reply["content"]["status"] == "ok"
    controls = [
        m["content"]["comm_id"]
        for m in msgs
        if m["msg_type"] == "comm_open" and "ack" in m["content"]["data"].get("state", {})
    ]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, out = execute(
            kc, "print('PIDS', *[int(p) for l in run.output_tail if l.startswith('pids') for p in l.split()[1:]])"
        )
        pids = [int(x) for x in _printed(out).split()[1:]]
        if pids:
            return controls[0], pids
        time.sleep(0.3)
    raise AssertionError("the script never printed its pids")


def test_stop_acts_while_another_cell_is_busy_over_a_subshell(kernel, tmp_path):
    """JupyterLab >= 4.4 and Notebook 7 send comm messages over a kernel subshell: a Stop click then ends the run's
    processes within a second while another cell sleeps, and the verdict is right."""
    kc = kernel
    sub = _open_subshell(kc)
    if sub is None:
        pytest.skip("this ipykernel has no subshells")
    comm_id, pids = _start_two_procs(kc, tmp_path)
    busy = kc.execute("import time; time.sleep(8); print('BUSY DONE')")
    time.sleep(1.0)
    t0 = time.monotonic()
    _click(kc, comm_id, "stop", sub)
    assert _gone(pids, 2.0), "the processes outlived the click by 2 s"
    latency = time.monotonic() - t0
    assert latency < 1.5, latency
    _reply(kc, busy, 30)
    _, msgs = execute(kc, "s = run.wait(10)\nprint('CAUSE', s['exit']['cause'], '|', s['exit']['message'])")
    out = _printed(msgs)
    assert "CAUSE stopped_by_user | Stopped by you (SIGINT, as Ctrl-C; it ended there)" in out, out


def test_stop_click_waits_for_a_busy_cell_without_subshells_and_runs_on_interrupt(tmp_path):
    """Without subshells (Colab, VS Code): the click waits for the busy cell; interrupting that cell (■) lets the
    stop run at once, as the button says."""
    km, kc = _start_kernel(tmp_path)
    try:
        comm_id, pids = _start_two_procs(kc, tmp_path)
        busy = kc.execute("import time; time.sleep(30)")
        time.sleep(1.0)
        _click(kc, comm_id, "stop")
        assert not _gone(pids, 1.5)  # queued behind the sleeping cell
        t0 = time.monotonic()
        km.interrupt_kernel()
        assert _gone(pids, 5.0), "the queued stop did not run once the cell was interrupted"
        assert time.monotonic() - t0 < 5.0
        assert _reply(kc, busy, 30)["content"]["status"] == "error"  # KeyboardInterrupt in the busy cell
        _, msgs = execute(kc, "print('CAUSE', run.wait(10)['exit']['cause'])")
        assert "CAUSE stopped_by_user" in _printed(msgs)
    finally:
        _close(km, kc)


# -- Colab's and Kaggle's kernels (MEMSCOPE_TEST_KERNEL=colab in CI's Colab stages) -------------------------------
def _controls(msgs):
    """The comm ids of the dashboards' Controls widgets opened by these messages."""
    return [
        m["content"]["comm_id"]
        for m in msgs
        if m["msg_type"] == "comm_open" and "ack" in m["content"]["data"].get("state", {})
    ]


def test_the_kernel_is_the_one_asked_for(kernel):
    """CI's Colab stage must really run Colab's kernel class and shell (a subclass of ZMQInteractiveShell), with
    Colab's extension loaded: what hid the missing dashboard was a test kernel that was not Colab's."""
    _, msgs = execute(
        kernel,
        "import sys; ip = get_ipython()\n"
        "print('SHELL', type(ip).__module__, type(ip).__name__, type(ip.kernel).__module__)\n"
        "print('COLAB', 'google.colab' in sys.modules)",
    )
    out = _printed(msgs)
    if KERNEL == "colab":
        assert "SHELL google.colab._shell Shell google.colab._kernel" in out, out
        assert "COLAB True" in out, out
    else:
        assert "SHELL ipykernel.zmqshell ZMQInteractiveShell" in out, out


def test_cell_magic_shows_a_dashboard_and_no_out_line(kernel, tmp_path):
    """%%memscope: the dashboard (its buttons) and no `Out[n]: <memscope.Run ...>` under it; the run is
    memscope.last_run()."""
    reply, msgs = execute(kernel, "%load_ext memscope")
    reply, msgs = execute(kernel, f"%%memscope --record {tmp_path}/runs\nimport time\ntime.sleep(1)\nprint('body ran')")
    assert reply["content"]["status"] == "ok"
    assert len(_controls(msgs)) == 1, [m["msg_type"] for m in msgs]
    assert not [m for m in msgs if m["msg_type"] == "execute_result"]
    _, msgs = execute(
        kernel,
        "import memscope\nr = memscope.last_run()\ns = r.wait(60)\n"
        "print('LAST', type(r).__name__, s['exit']['cause'], list(r.output_tail))",
    )
    out = _printed(msgs)
    assert "LAST Run ok" in out and "body ran" in out, out


def test_python_api_and_reopen_show_dashboards_of_a_run_with_workers(kernel, tmp_path):
    """memscope.run() shows the same dashboard as %memscope (a numpy training with two multiprocessing workers);
    memscope.reopen() shows the recorded run's."""
    reply, msgs = execute(
        kernel,
        f"import memscope\nrun = memscope.run([{script('np_workers.py')!r}, '3'], "
        f"record_dir={str(tmp_path / 'runs')!r})",
    )
    assert reply["content"]["status"] == "ok"
    assert len(_controls(msgs)) == 1
    _, msgs = execute(
        kernel,
        "s = run.wait(90)\nroles = sorted(p['role'] for p in s['processes'])\n"
        "print('END', s['exit']['cause'], len(s['processes']), run.run_id)",
    )
    out = _printed(msgs)
    assert "END ok 3" in out, out
    run_id = out.split("END ok 3")[1].split()[0]
    reply, msgs = execute(kernel, f"d = memscope.reopen({run_id!r}, {str(tmp_path / 'runs')!r})")
    assert reply["content"]["status"] == "ok"
    views = [
        m
        for m in msgs
        if m["msg_type"] == "display_data" and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    assert len(views) == 1
    _, msgs = execute(kernel, "print('CARD', d.card.value)\nprint('PROCS', d.table.value.count('<tr'))")
    out = _printed(msgs)
    assert "CARD" in out and "finished normally" in out.lower(), out
    assert not _controls(msgs)  # a recorded run has no Stop to click


def test_a_runs_lines_stay_in_its_own_cell(kernel, tmp_path):
    """What memscope says about a run from its threads (here: the summary cannot be written) goes to that run's
    dashboard, never into the cell that happens to be executing when the run ends."""
    execute(kernel, "%load_ext memscope")
    out = tmp_path / "out"
    out.mkdir()
    # The summary's folder is there at the start (checked then) and gone at the end.
    reply, msgs = execute(
        kernel,
        f"run = %memscope --record {tmp_path}/runs --summary-json {out}/s.json "
        f"{script('clean.py')} 1.5\nimport shutil; shutil.rmtree({str(out)!r})",
    )
    controls = _controls(msgs)
    assert len(controls) == 1
    _, busy = execute(kernel, "import time\nrun.wait(60)\ntime.sleep(1.5)\nprint('OTHER CELL')")
    assert _printed(busy).strip() == "OTHER CELL", _printed(busy)
    assert not [m for m in busy if m["msg_type"] in ("display_data", "error")]
    _, msgs = execute(kernel, "import memscope.ui.dashboard as D\nprint('NOTES', D.last._notes)")
    assert "cannot write the summary to" in _printed(msgs), _printed(msgs)


def test_without_widgets_the_end_of_run_text_updates_its_own_cell(kernel, tmp_path):
    """A kernel whose frontend renders no widgets: the run's text is one display in the cell that started it,
    updated in place at the end; the cell executing then gets nothing."""
    execute(kernel, "%load_ext memscope\nimport memscope.magic as M\nM.widgets_can_render = lambda ip: False")
    reply, msgs = execute(kernel, f"run = %memscope --record {tmp_path}/runs {script('clean.py')} 1")
    shown = [m for m in msgs if m["msg_type"] == "display_data"]
    assert len(shown) == 1 and "memscope: started" in shown[0]["content"]["data"]["text/plain"]
    display_id = shown[0]["content"]["transient"]["display_id"]
    _, busy = execute(kernel, "import time\nrun.wait(60)\ntime.sleep(1.5)\nprint('OTHER CELL')")
    assert _printed(busy).strip() == "OTHER CELL", _printed(busy)
    updates = [m for m in busy if m["msg_type"] == "update_display_data"]
    assert updates and all(m["content"]["transient"]["display_id"] == display_id for m in updates)
    final = updates[-1]["content"]["data"]["text/plain"]
    assert "memscope: ok" in final and "\x1b[" not in final, final


# -- issue 23: a re-run restarts; a running run can always be shown again ----------------------------------------
def _execute_in_cell(kc, code, cell_id, timeout=90):
    """Run code as the cell ``cell_id`` (JupyterLab's execute_request); returns (reply, iopub messages until idle)."""
    msg_id = _send_in_cell(kc, code, cell_id)
    msgs = _until_idle(kc, msg_id, timeout)
    return _reply(kc, msg_id, timeout), msgs


def _pids_of(kc, name):
    """The pids two_procs.py printed in run ``name``'s output."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, out = execute(
            kc, f"print('PIDS', *[int(p) for l in {name}.output_tail if l.startswith('pids') for p in l.split()[1:]])"
        )
        pids = [int(x) for x in _printed(out).split()[1:]]
        if pids:
            return pids
        time.sleep(0.3)
    raise AssertionError(f"{name}: the script never printed its pids")


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _widget_views(msgs):
    """The widget views shown by these messages (a display or a cell's result), by model id."""
    return [
        m["content"]["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        for m in msgs
        if m["msg_type"] in ("display_data", "execute_result")
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]


def test_rerunning_a_cell_stops_its_previous_run_and_nothing_else(kernel, tmp_path):
    """Re-running a %memscope cell means "restart": the run that cell started before is stopped as Stop does
    (processes gone before the new run starts, verdict stopped_by_user) and the new dashboard says so. A run of
    another cell, and one kept by --keep-previous, go on."""
    kc = kernel
    execute(kc, "%load_ext memscope\nimport memscope.ui.dashboard as D")
    cmd = f"%memscope --record {tmp_path}/runs --grace 2 {script('two_procs.py')} 60"
    for name, cell in (("other", "cell-other"), ("kept", "cell-keep"), ("first", "cell-1")):
        reply, _ = _execute_in_cell(kc, f"{name} = {cmd}", cell)
        assert reply["content"]["status"] == "ok"
    first, other, kept = _pids_of(kc, "first"), _pids_of(kc, "other"), _pids_of(kc, "kept")
    assert all(_alive(p) for p in first + other + kept)
    t0 = time.monotonic()
    reply, msgs = _execute_in_cell(kc, f"second = {cmd}", "cell-1")
    assert reply["content"]["status"] == "ok"
    assert time.monotonic() - t0 < 2 * 2 + 15  # bounded by the stop sequence
    assert not any(_alive(p) for p in first), "the re-run left the previous run's processes going"
    assert len(_controls(msgs)) == 1  # the new run's dashboard
    second = _pids_of(kc, "second")
    assert all(_alive(p) for p in second + other + kept)
    # A re-run with a typo is refused before it stops anything: the cell's run goes on.
    _, typo = _execute_in_cell(kc, f"%memscope --record {tmp_path}/runs missing_script.py", "cell-1")
    assert "memscope: missing_script.py: no such file" in _printed(typo)
    assert all(_alive(p) for p in second)
    _, out = execute(
        kc,
        "print('FIRST', first.ended, first.summary()['exit']['cause'], first.run_id)\n"
        "print('NOTES', D.last.run is second, D.last._notes)\n"
        "print('OTHER', other.ended, kept.ended)",
    )
    out = _printed(out)
    assert "FIRST True stopped_by_user" in out, out
    first_id = out.split("FIRST True stopped_by_user")[1].split()[0]
    assert re.search(
        rf"NOTES True \['memscope: stopped the previous run of this cell, {first_id}, after 0:00:\d\d'\]", out
    ), out
    # The note reached the browser (the new dashboard's notes widget).
    wire = " ".join(str(m["content"].get("data", {})) for m in msgs + drain(kc, 1.0))
    assert f"stopped the previous run of this cell, {first_id}" in wire
    assert "OTHER False False" in out, out
    # --keep-previous: the cell's earlier run goes on beside the new one.
    reply, msgs = _execute_in_cell(kc, f"kept2 = {cmd.replace('%memscope', '%memscope --keep-previous')}", "cell-keep")
    assert reply["content"]["status"] == "ok" and len(_controls(msgs)) == 1
    kept2 = _pids_of(kc, "kept2")
    assert all(_alive(p) for p in kept + kept2 + other + second)
    _, out = execute(kc, "print('KEPT', kept.ended, D.last._notes)\nfor r in (other, kept, kept2, second): r.kill()")
    assert "KEPT False []" in _printed(out), _printed(out)


def test_a_run_is_shown_again_live_by_displaying_it_or_reopening_it(kernel, tmp_path):
    """`run` as a cell's last line shows its live dashboard (with Stop); memscope.reopen(run_id) of a run still
    going in this kernel follows it live (processes running, no "unknown"); a run going in another process
    reopens as "running"."""
    import subprocess
    import sys

    kc = kernel
    # The magic as a cell's last line: its dashboard once, and the run's repr as the result (not a second view).
    reply, msgs = execute(
        kc, f"%load_ext memscope\nimport memscope\n%memscope --record {tmp_path}/runs {script('two_procs.py')} 60"
    )
    assert reply["content"]["status"] == "ok"
    assert len(_widget_views(msgs)) == 1 and len(_controls(msgs)) == 1, [m["msg_type"] for m in msgs]
    result = [m["content"]["data"] for m in msgs if m["msg_type"] == "execute_result"]
    assert len(result) == 1 and list(result[0]) == ["text/plain"] and "<memscope.Run" in result[0]["text/plain"]
    execute(kc, "run = memscope.last_run()")
    pids = _pids_of(kc, "run")
    reply, msgs = execute(kc, "run")
    assert reply["content"]["status"] == "ok"
    views = _widget_views(msgs)
    assert len(views) == 1 and len(_controls(msgs)) == 1, [m["msg_type"] for m in msgs]
    opened = {m["content"]["comm_id"] for m in msgs if m["msg_type"] == "comm_open"}
    assert views[0] in opened  # the view is of a widget made for it, not a stale one
    reply, msgs = execute(
        kc, f"d = memscope.reopen(run.run_id, {str(tmp_path / 'runs')!r})\nimport time; time.sleep(1)"
    )
    assert reply["content"]["status"] == "ok"
    assert len(_widget_views(msgs)) == 1 and len(_controls(msgs)) == 1
    _, out = execute(
        kc,
        "print('LIVE', d.run is run, d._thread.is_alive())\nprint('STATUS', d.status.value)\n"
        "print('CARD', repr(d.card.value))\nprint('TABLE', d.table.value.count('>running<'))",
    )
    out = _printed(out)
    assert "LIVE True True" in out and "● running" in out and "CARD ''" in out, out
    assert "unknown" not in out and "TABLE 2" in out, out
    assert all(_alive(p) for p in pids)
    execute(kc, "run.kill()")
    # A run going in another process (the CLI): its record so far, saying "running", not "unknown".
    cli_argv = ["run", "--quiet", "--record", str(tmp_path / "cli"), script("sleeper.py"), "8"]
    cli = subprocess.Popen(
        [sys.executable, "-c", "import sys, memscope.cli as c; sys.exit(c.main())", *cli_argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from memscope.record.catalogue import list_runs

        deadline = time.monotonic() + 30
        while not list_runs(str(tmp_path / "cli")) and time.monotonic() < deadline:  # the record's run row
            time.sleep(0.2)
        time.sleep(1.0)  # its first samples
        _, msgs = execute(
            kc,
            f"d2 = memscope.reopen('last', {str(tmp_path / 'cli')!r})\nprint('CARD', d2.card.value, d2.status.value)\n"
            "print('TABLE2', d2.table.value.count('>running<'))",
        )
        out = _printed(msgs) + str([m["content"]["evalue"] for m in msgs if m["msg_type"] == "error"])
        assert "running" in out and "still going" in out and "unknown" not in out, out
        assert "TABLE2 1" in out, out  # the sleeper, alive: not "exited"
    finally:
        cli.send_signal(2)
        cli.wait(30)
