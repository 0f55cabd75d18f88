import os
import sys

import psutil
import pytest

import memscope

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
# The Jupyter kernel the kernel and notebook tests start: "python3" (ipykernel's), or "colab" (Colab's own kernel
# class and extension, as .ci/colab-kernelspec installs it into a replica of Colab's runtime).
KERNEL = os.environ.get("MEMSCOPE_TEST_KERNEL", "python3")
# CI's replica stages test the installed wheel, not this source tree: a file missing from the wheel must fail.
if os.environ.get("MEMSCOPE_EXPECT_INSTALLED") and os.path.abspath(memscope.__file__).startswith(
    os.path.join(os.path.dirname(HERE), "memscope") + os.sep
):
    raise RuntimeError(f"memscope was imported from the source tree ({memscope.__file__}), not the installed wheel")


def script(name: str) -> str:
    return os.path.join(SCRIPTS, name)


@pytest.fixture
def record_dir(tmp_path):
    return str(tmp_path / "runs")


@pytest.fixture
def start(record_dir):
    """Start a command under memscope with fast sampling; every run is stopped at teardown."""
    runs = []

    def _start(argv, **options):
        options.setdefault("record_dir", record_dir)
        options.setdefault("interval_s", 0.05)
        options.setdefault("pss_interval_s", 0.3)
        options.setdefault("output", "capture")
        r = memscope.run(argv, **options)
        runs.append(r)
        return r

    yield _start
    for r in runs:
        if not r.ended:
            r.kill()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_until(port: int, needle: bytes = b"memscope_run_info{", timeout: float = 60.0) -> bytes:
    """The exporter's /metrics page on ``port`` once it holds ``needle`` (the last page read at the deadline)."""
    import time
    import urllib.request

    deadline, metrics = time.monotonic() + timeout, b""
    while needle not in metrics and time.monotonic() < deadline:
        try:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        except OSError:
            time.sleep(0.2)
    return metrics


def wait_for_output(run, text, timeout=30.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in line for line in list(run.output_tail)):
            return
        if run.ended:
            break
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared; tail: {list(run.output_tail)[-5:]}")


def alive(pids):
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def has_torch() -> bool:
    try:
        import torch  # noqa: F401

        return True
    except ImportError:
        return False


PY = sys.executable


def apply_chart_message(lines: dict, seq: int, msg: dict, buffers: list) -> tuple[dict, int]:
    """What chart.js's applyLines does with a chart's message (memscope.ui.chart.ChartWire), in Python: the lines
    by wire key as (t, y) lists, and the seq they are at. A message on another base changes nothing."""
    from array import array

    if msg["base"] is not None and msg["base"] != seq:
        return lines, seq
    nxt = {k: ([], []) if msg["base"] is None else lines.get(k, ([], [])) for k in msg["keys"]}
    for key, k, ti, yi in msg["series"]:
        t, y = nxt[key]
        nxt[key] = (t[:k] + list(array("f", bytes(buffers[ti]))), y[:k] + list(array("f", bytes(buffers[yi]))))
    return nxt, msg["seq"]


def chart_lines_from_iopub(msgs: list) -> dict:
    """The lines a browser would hold after the chart messages among these iopub messages (one chart)."""
    lines: dict = {}
    seq = 0
    for m in msgs:
        if m["msg_type"] != "comm_msg":
            continue
        data = m["content"]["data"]
        content = data.get("content") or {}
        if data.get("method") == "custom" and content.get("type") == "memscope-data":
            lines, seq = apply_chart_message(lines, seq, content, m.get("buffers") or [])
    return lines


CG_ROOT = "/sys/fs/cgroup/memory"


def make_memory_cgroup(limit: int, tag: str = "test") -> str | None:
    """A cgroup v1 memory group with this limit, made by the test (None where the controller is not writable):
    the kernel's OOM killer for real. The caller removes it (os.rmdir) once its processes are gone."""
    path = os.path.join(CG_ROOT, f"memscope-{tag}-{os.getpid()}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
    except OSError:
        return None
    return path
