"""The Prometheus exporter of one node: families and labels, rank from RANK, escaping, the port check, the Pushgateway.

The exporter's state is fed the records a Run publishes (real processes for the rank test); the endpoint, the CLI
and the push run for real: a real HTTP scrape, real `memscope run` subprocesses, Debian's prometheus-pushgateway.
"""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import PY, free_port, script
from prometheus_client.parser import text_string_to_metric_families

from memscope.collect.procfs import read_environ
from memscope.export.prometheus import LEAK_EVERY_S, Exporter, check_pushgateway, parse_listen
from memscope.model import Event, HostSample, ProcessExited, ProcessSeen, ProcMem, RunEnded, TreeSample

MEMSCOPE = [PY, "-m", "memscope.cli"]
MiB = 1 << 20
PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")


def scrape(ex: Exporter) -> dict:
    """{(family, frozenset(labels)): value} from the endpoint, as Prometheus would read it."""
    text = urllib.request.urlopen(ex.url, timeout=10).read().decode("utf-8")
    return parse(text)


def parse(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def pick(samples: dict, name: str, **labels) -> list:
    want = set(labels.items())
    return [(dict(k[1]), v) for k, v in samples.items() if k[0] == name and want <= k[1]]


def seen(pid, role, ppid=1, t=0.0):
    return ProcessSeen(t, pid, ppid, role, "python3", "python3 x.py", 0.0)


def host(limit=None, total=16 << 30, available=8 << 30):
    return HostSample(1.0, total, available, 0, 0, limit, None, 0, None)


def exec_done(pid: int, timeout: float = 10.0) -> int:
    """Wait until the process' environment reads (just after a fork, mid-exec, it reads empty)."""
    deadline = time.monotonic() + timeout
    while read_environ(pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid


@pytest.fixture
def ranks():
    """Real processes started with RANK=0, 1, ...: their pids (the exporter reads RANK from /proc)."""
    procs = []

    def _make(n):
        for i in range(n):
            procs.append(subprocess.Popen(["sleep", "60"], env=dict(os.environ, RANK=str(i))))
        return [exec_done(p.pid) for p in procs[-n:]]

    yield _make
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def exporter():
    made = []

    def _make(command=("train.py",), hostname="node-a", **kw):
        ex = Exporter("run-1", command, hostname, **kw)
        ex.serve("127.0.0.1", 0)
        made.append(ex)
        return ex

    yield _make
    for ex in made:
        ex.close()


def test_listen_and_pushgateway_arguments():
    assert parse_listen("9464") == ("127.0.0.1", 9464)  # default: this machine only
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    assert parse_listen("10.1.2.3:9464") == ("10.1.2.3", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("x", "99999", "::1:9464", "host:", ""):
        with pytest.raises(ValueError):
            parse_listen(bad)
    assert check_pushgateway("pg:9091") == "http://pg:9091"
    for bad in ("ftp://pg", "http://", "http://pg:port"):
        with pytest.raises(ValueError):
            check_pushgateway(bad)


def test_rank_comes_from_each_process_environment_and_workers_inherit_it(exporter):
    # Real processes: a rank started with RANK=3 and its child (a DataLoader worker's stand-in), a launcher
    # without RANK, and a rank's child whose environment was emptied (it inherits its parent's rank).
    env = dict(os.environ, RANK="3")
    env.pop("PYTHONPATH", None)
    code = (
        "import subprocess,sys,time; c=subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']"
        "{}); print(c.pid, flush=True); time.sleep(30)"
    )
    rank = subprocess.Popen([sys.executable, "-c", code.format("")], env=env, stdout=subprocess.PIPE, text=True)
    bare = subprocess.Popen([sys.executable, "-c", code.format(", env={}")], env=env, stdout=subprocess.PIPE, text=True)
    launcher_env = {k: v for k, v in env.items() if k != "RANK"}
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=launcher_env)
    try:
        worker, bare_child = int(rank.stdout.readline()), int(bare.stdout.readline())
        for pid in (worker, bare_child, launcher.pid):
            exec_done(pid)
        ex = exporter()
        for rec in (
            seen(launcher.pid, "wrapper"),
            seen(rank.pid, "rank", launcher.pid),
            seen(worker, "dataloader_worker", rank.pid),
            seen(bare.pid, "rank", launcher.pid),
            seen(bare_child, "dataloader_worker", bare.pid),
        ):
            ex.on_record(rec)
        ex.on_record(
            TreeSample(
                1.0,
                "pss",
                tuple(
                    ProcMem(p, 100 * MiB, 60 * MiB, 40 * MiB, 20 * MiB, 0)
                    for p in (launcher.pid, rank.pid, worker, bare.pid, bare_child)
                ),
            )
        )
        s = scrape(ex)
        assert {(d["rank"], d["role"]): v for d, v in pick(s, "memscope_processes")} == {
            ("", "wrapper"): 1,
            ("3", "rank"): 2,
            ("3", "dataloader_worker"): 2,
        }
        pss = {(d["rank"], d["role"]): v for d, v in pick(s, "memscope_memory_bytes", kind="pss")}
        assert pss[("3", "dataloader_worker")] == 120 * MiB and pss[("", "wrapper")] == 60 * MiB
        assert pick(s, "memscope_memory_bytes", kind="private", rank="3", role="rank")[0][1] == 80 * MiB
        assert pick(s, "memscope_memory_bytes", kind="rss", rank="", role="wrapper")[0][1] == 100 * MiB
        assert all(d["run"] == "run-1" and d["hostname"] == "node-a" for d, _ in pick(s, "memscope_processes"))
        # No pid label anywhere: the number of series is bounded by ranks x roles.
        assert not any("pid" in dict(k[1]) for k in s)
        ex.on_record(ProcessExited(2.0, worker, 0, None))
        assert pick(scrape(ex), "memscope_processes", rank="3", role="dataloader_worker")[0][1] == 1
    finally:
        for p in (rank, bare, launcher):
            p.kill()
            p.wait()
        for pid in (locals().get("worker"), locals().get("bare_child")):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)  # our own grandchildren, pids read from their parents
                except OSError:
                    pass


def test_labels_are_escaped_commands_with_quotes_newlines_and_utf8(exporter):
    command = ["python", 'say "hi"', "a\nb\\c", "données-ü-λ-日本", '} x="1" {']
    ex = exporter(command=command, hostname='host "1"\nß')
    text = urllib.request.urlopen(ex.url, timeout=10).read().decode("utf-8")
    info = [line for line in text.splitlines() if line.startswith("memscope_run_info{")]
    assert len(info) == 1  # the newline did not break the line
    assert '\\"hi\\"' in info[0] and "\\n" in info[0] and "données-ü-λ-日本" in info[0]
    s = parse(text)
    ((labels, value),) = pick(s, "memscope_run_info")
    assert value == 1
    import shlex

    assert shlex.split(labels["command"]) == command  # round trip: exactly what ran, quoted as a shell would
    assert labels["hostname"] == 'host "1"\nß'


def test_limit_source_host_available_gpu_and_exit(exporter, ranks):
    ex = exporter(limit_from_flag=True)
    ex.on_record(host(limit=4 << 30))
    s = scrape(ex)
    assert pick(s, "memscope_limit_bytes")[0] == ({"run": "run-1", "hostname": "node-a", "source": "flag"}, 4 << 30)
    assert pick(s, "memscope_host_available_bytes")[0][1] == 8 << 30
    ex2 = exporter()
    ex2.on_record(host(limit=2 << 30))
    assert pick(scrape(ex2), "memscope_limit_bytes")[0][0]["source"] == "cgroup"
    ex2.on_record(host(limit=None))
    assert pick(scrape(ex2), "memscope_limit_bytes")[0] == (
        {"run": "run-1", "hostname": "node-a", "source": "host"},
        16 << 30,
    )
    # GPU: an NVML round shaped as collect/gpu.py publishes it, and PyTorch's allocator from the agent.
    r0, r1 = ranks(2)
    ex2.on_record(seen(r0, "rank"))
    ex2.on_record(seen(r1, "rank"))
    ex2.on_record(
        Event(
            1.0,
            None,
            "gpu",
            {
                "devices": [{"index": 0, "name": "H100", "total": 80 << 30, "used": 30 << 30}],
                "procs": [
                    {"pid": r0, "device": 0, "used": 10 << 30},
                    {"pid": r1, "device": 1, "used": 12 << 30},
                    {"pid": r1, "device": 1, "used": None},
                ],
                "other_procs": 1,
            },
        )
    )
    ex2.on_record(
        Event(1.0, r0, "torch_alloc", {"backend": "cuda", "device": 0, "allocated": 6 << 30, "reserved": 9 << 30})
    )
    ex2.on_record(Event(1.0, r0, "torch_alloc", {"backend": "mps", "device": 0, "allocated": 1}))
    g = {(d["rank"], d["gpu"], d["kind"]): v for d, v in pick(scrape(ex2), "memscope_gpu_memory_bytes")}
    assert g == {
        ("0", "0", "used"): 10 << 30,
        ("1", "1", "used"): 12 << 30,
        ("0", "0", "allocated"): 6 << 30,
        ("0", "0", "reserved"): 9 << 30,
    }
    ex2.on_record(ProcessExited(2.0, r0, 0, None))
    assert ("0", "0", "allocated") not in {
        (d["rank"], d["gpu"], d["kind"]) for d, _ in pick(scrape(ex2), "memscope_gpu_memory_bytes")
    }
    assert not pick(scrape(ex2), "memscope_exit_info")
    ex2.on_record(RunEnded(3.0, {"exit": {"cause": "worker_crash", "signal": "SIGSEGV"}}))
    assert pick(scrape(ex2), "memscope_exit_info")[0] == (
        {"run": "run-1", "hostname": "node-a", "cause": "worker_crash", "signal": "SIGSEGV"},
        1,
    )


def test_leak_slope_per_rank_and_role_from_private_memory(exporter, ranks):
    clock = {"t": 0.0}
    ex = exporter(clock=lambda: clock["t"])
    r0, r1 = ranks(2)
    ex.on_record(seen(r0, "rank"))
    ex.on_record(seen(r1, "rank"))
    for i in range(90):  # 45 s of PSS rounds: rank 1's anonymous memory grows 2 MiB/s, rank 0 holds flat
        t = i * 0.5
        ex.on_record(
            TreeSample(
                t,
                "pss",
                (
                    ProcMem(r0, 300 * MiB, 200 * MiB, 150 * MiB + (i % 3) * 64 * 1024, 50 * MiB, 0),
                    ProcMem(r1, 300 * MiB, 200 * MiB, 150 * MiB + int(t * 2 * MiB), 50 * MiB, 0),
                ),
            )
        )
        if i == 20:
            s = scrape(ex)  # 10 s in: too early for a verdict, and it says so (NaN slope)
            ((d, v),) = pick(s, "memscope_leak_slope_bytes_per_second", rank="1")
            assert d["verdict"] == "insufficient_data" and math.isnan(v)
    clock["t"] = 100.0
    s = scrape(ex)
    ((d1, v1),) = pick(s, "memscope_leak_slope_bytes_per_second", rank="1")
    ((d0, v0),) = pick(s, "memscope_leak_slope_bytes_per_second", rank="0")
    assert d1["verdict"] == "leak" and d1["role"] == "rank" and 1.8 * MiB < v1 < 2.2 * MiB
    assert d0["verdict"] == "no_leak" and abs(v0) < 0.1 * MiB
    # Refitted at most every LEAK_EVERY_S, not on every scrape: rank 1 now leaks 4x faster, and only a scrape
    # past that period says so.
    for i in range(90, 180):
        t = i * 0.5
        ex.on_record(
            TreeSample(
                t,
                "pss",
                (
                    ProcMem(r0, 300 * MiB, 200 * MiB, 150 * MiB, 50 * MiB, 0),
                    ProcMem(r1, 300 * MiB, 200 * MiB, 150 * MiB + int(90 * MiB + (t - 45) * 8 * MiB), 50 * MiB, 0),
                ),
            )
        )
    clock["t"] = 100.0 + LEAK_EVERY_S / 2
    assert pick(scrape(ex), "memscope_leak_slope_bytes_per_second", rank="1")[0][1] == v1
    clock["t"] = 100.0 + LEAK_EVERY_S
    assert pick(scrape(ex), "memscope_leak_slope_bytes_per_second", rank="1")[0][1] > 3 * MiB


def memscope(*args, timeout=120, **kw):
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_port_taken_is_one_line_exit_2_and_nothing_started(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        marker = tmp_path / "ran"
        r = memscope(
            "run",
            "--record",
            str(tmp_path / "runs"),
            "--prometheus",
            str(port),
            "--",
            PY,
            "-c",
            f"open({str(marker)!r}, 'w')",
        )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "Address already in use" in r.stderr
    assert not marker.exists()  # the command never ran
    assert not list((tmp_path / "runs").glob("*.sqlite"))  # and no record was left behind
    r = memscope("run", "--prometheus", "nine", script("clean.py"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "[HOST:]PORT" in r.stderr


@pytest.fixture
def pushgateway(tmp_path):
    if PUSHGATEWAY is None:
        pytest.skip("prometheus-pushgateway is not installed (apt-get install prometheus-pushgateway)")
    port = free_port()
    proc = subprocess.Popen(
        [PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("prometheus-pushgateway did not start")
            time.sleep(0.1)
    yield url
    proc.kill()
    proc.wait()


def test_pushgateway_keeps_the_final_state_of_a_run_shorter_than_a_scrape(pushgateway, tmp_path):
    r = memscope(
        "run",
        "-q",
        "--record",
        str(tmp_path / "runs"),
        "--hostname",
        "short-node",
        "--pushgateway",
        pushgateway,
        script("clean.py"),
        "0.3",
        "3",
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr == ""
    s = parse(urllib.request.urlopen(pushgateway + "/metrics", timeout=10).read().decode())
    ((labels, v),) = pick(s, "memscope_exit_info", hostname="short-node")
    assert v == 1 and labels["cause"] == "exit_nonzero" and labels["job"] == "memscope"
    run_id = labels["run"]
    assert run_id and (tmp_path / "runs" / f"{run_id}.sqlite").exists()
    ((labels, _),) = pick(s, "memscope_run_info", hostname="short-node")
    assert "clean.py 0.3 3" in labels["command"]
    # The run's memory was never scraped, but the push says what its leak fit and its host looked like.
    assert pick(s, "memscope_host_available_bytes", hostname="short-node")[0][1] > 0


def test_pushgateway_down_warns_in_one_line_and_the_exit_status_stands(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    r = memscope("run", "-q", "--record", str(tmp_path / "runs"), "--pushgateway", dead, script("clean.py"), "0.1", "0")
    assert r.returncode == 0
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"memscope: could not push the final state to {dead}")


def test_the_final_fit_leaves_the_teardown_out(exporter, ranks):
    # A leak whose process frees everything as it exits: the last round is low. Fitted with it, the whole run
    # reads as one long spike; the final verdict must still be the leak.
    ex = exporter()
    (r0,) = ranks(1)
    ex.on_record(seen(r0, "rank"))
    for i in range(80):
        t = i * 0.5
        ex.on_record(TreeSample(t, "pss", (ProcMem(r0, 0, 1, 100 * MiB + int(t * 3 * MiB), 0, 0),)))
    ex.on_record(TreeSample(40.2, "pss", (ProcMem(r0, 0, 1, 20 * MiB, 0, 0),)))
    ex.on_record(ProcessExited(40.4, r0, 0, None))
    ex.on_record(RunEnded(40.5, {"exit": {"cause": "ok"}}))
    ((d, v),) = pick(scrape(ex), "memscope_leak_slope_bytes_per_second")
    assert d["verdict"] == "leak" and 2.5 * MiB < v < 3.5 * MiB


def test_the_magic_and_the_python_api_take_the_same_options(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell

    import memscope
    from memscope.errors import LaunchError
    from memscope.magic import load

    ip = InteractiveShell.instance()
    load(ip)
    port = free_port()
    run = ip.run_line_magic(
        "memscope",
        f"--record {tmp_path} --prometheus {port} --hostname nb-host --prometheus-linger 30 {script('clean.py')} 1",
    )
    try:
        assert run.exporter.url == f"http://127.0.0.1:{port}/metrics"
        run.wait(60)
        s = parse(urllib.request.urlopen(run.exporter.url, timeout=10).read().decode())  # lingering: the end
        assert pick(s, "memscope_exit_info", hostname="nb-host", cause="ok")
        assert pick(s, "memscope_run_info", run=run.run_id)
    finally:
        run.exporter.close()
    with pytest.raises(LaunchError, match="not \\[HOST:\\]PORT"):
        memscope.run([script("clean.py")], prometheus="localhost:http", record_dir=str(tmp_path), output="capture")


def test_the_job_view_escapes_what_prometheus_labels_hold():
    from memscope.record.cluster import Job, Panel, selector
    from memscope.ui.cluster import job_table, render_html, text_table

    evil = '<script>alert("x")</script>'
    p = Panel(
        evil,
        "0",
        roles={"rank": {"t": [0.0, 1.0], "y": [1.0 * MiB, 2.0 * MiB]}},
        leak={"rank": {"verdict": "leak", "slope": 1.0 * MiB}},
        exit={"cause": evil, "signal": ""},
        command=f"python train.py --tag '{evil}'",
    )
    job = Job("http://prom:9090", selector(run=evil), 0.0, 2.0, 1.0, [p])
    assert selector(run='a"b\nc') == '{run="a\\"b\\nc"}'  # PromQL string escaping
    for page in (job_table(job), render_html(job)):
        assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)" in page
    assert "LEAK +60 MiB/min" in job_table(job) and p.peak_bytes() == 2 * MiB
    assert evil[:20] in text_table(job)  # a terminal shows text as it is


def test_exited_processes_are_forgotten_and_a_late_role_update_does_not_revive_them(exporter, ranks):
    ex = exporter()
    (r0,) = ranks(1)
    first = seen(r0, "other")
    ex.on_record(first)
    ex.on_record(ProcessExited(1.0, r0, 0, None))
    ex.on_record(ProcessSeen(1.1, r0, 1, "rank", "python3", "", first.create_time))  # queued before the exit
    assert not pick(scrape(ex), "memscope_processes") and not ex._procs
    ex.on_record(ProcessSeen(2.0, r0, 1, "rank", "python3", "", first.create_time + 5))  # the pid, reused
    assert pick(scrape(ex), "memscope_processes", role="rank", rank="0")[0][1] == 1
