"""The fourth round's fixes, tried again by a hostile but fair user (review32): the cases that still harmed the
run, lost data or leaked a secret, each on the real mechanism.

Every signal here goes to a process this test started (by pid), never by name.
"""

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import PY, free_port, scrape_until, script
from test_signals_round4 import (
    MEMSCOPE,
    _end,
    _freezer_cgroup,
    _readline,
    _rmdir_when_empty,
    _slurm_signal,
    events_of,
)


def test_a_slurm_stop_in_a_batch_script_gives_the_training_one_sigterm(tmp_path):
    # `memscope run` in a batch script: Slurm signals every process of the step, the script's shell first (lowest
    # pid). The shell dies of it at once, memscope is re-parented before its Python handler runs, and a check of
    # "is my parent a batch shell under slurmstepd" made at that moment said no: memscope passed its copy on and
    # the training got two SIGTERMs ("force quit", checkpoint lost), 2 of 3 tries by hand.
    cg = _freezer_cgroup()
    if cg is None:
        pytest.skip("no writable cgroup v1 freezer here")
    ck, sj = tmp_path / "ckpt", tmp_path / "summary.json"
    batch = tmp_path / "batch.sh"
    batch.write_text(
        f"echo $$ > {cg}/cgroup.procs\n"
        f"{PY} -m memscope.cli run --quiet --grace 5 --record {tmp_path / 'runs'} --summary-json {sj} -- "
        f"{PY} {script('ckpt_term.py')} {ck} 1.0\n"
        "echo script done $?\n"
    )
    stepd = tmp_path / "slurmstepd"
    stepd.symlink_to("/bin/sh")
    env = dict(os.environ, SLURM_JOB_ID="4243")

    p = subprocess.Popen(
        [str(stepd), "-c", f"bash {batch} </dev/null; echo step done $?"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = _readline(p)
        assert line.startswith("ready"), line
        time.sleep(0.3)
        pids = _slurm_signal(cg, signal.SIGTERM)
        assert len(pids) == 3  # the script's shell, memscope and the training
        out, err = p.communicate(timeout=60)  # EOF once memscope and the training have ended
        assert "checkpoint saved" in out and "force quit" not in out, (out, err)
        s = json.loads(sj.read_text())
        assert ck.read_text() == "step 42\n"
        assert [e["data"]["signal"] for e in events_of(s["record"], "signal_sent")] == [], s["exit"]
    finally:
        _end(p)
        _rmdir_when_empty(cg)


def test_a_header_credential_on_a_command_line_reaches_no_label_or_record(tmp_path):
    # `curl -H "PRIVATE-TOKEN: …"` (GitLab's documented form), `-H "X-Api-Key: …"`: a header of a secret name given
    # as an argument. Its value was in the Prometheus label (served on every interface with --prometheus :PORT),
    # the summary and the record's bytes.
    runs, sj = tmp_path / "runs", tmp_path / "s.json"
    port = free_port()
    ms = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--record", str(runs), "--summary-json", str(sj), "--prometheus",
         f"127.0.0.1:{port}", "--prometheus-linger", "3", "--", PY, "-c", "import time; time.sleep(3)",
         "-H", "PRIVATE-TOKEN: gitlabOldStyle20chars", "-H", "X-Api-Key:hdrsecretvalue7", "bash -c 'curl -H "
         "\"x-auth-token: insidesecret8\" https://example.invalid'", "-H", "Content-Type: application/json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        metrics = scrape_until(port)
        out, err = ms.communicate(timeout=90)
    finally:
        if ms.poll() is None:
            ms.kill()
            ms.wait()
    assert ms.returncode == 0, err
    info = next(line for line in metrics.decode().splitlines() if line.startswith("memscope_run_info{"))
    assert "PRIVATE-TOKEN: ***" in info and "Content-Type: application/json" in info, info
    texts = {"label": metrics, "summary": sj.read_bytes()}
    for name in os.listdir(runs):
        texts[name] = (runs / name).read_bytes()
    for where, data in texts.items():
        for secret in (b"gitlabOldStyle20chars", b"hdrsecretvalue7", b"insidesecret8"):
            assert secret not in data, (where, secret)


@pytest.mark.parametrize(
    "change",
    [
        "update run set summary=json_set(summary,'$.leak','x')",
        "update run set summary=json_set(summary,'$.warnings',json('{\"a\":1}'))",
    ],
)
def test_a_summary_of_the_wrong_shape_is_one_line_not_a_traceback(tmp_path, change):
    # A damaged summary (a field of another type) printed an AttributeError / TypeError traceback in the plain
    # report (--json and --html already said one line).
    import sqlite3

    runs = tmp_path / "runs"
    p = subprocess.run([*MEMSCOPE, "run", "--quiet", "--record", str(runs), "--", PY, "-c", "print(1)"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    (record,) = runs.glob("*.sqlite")
    with sqlite3.connect(record) as db:
        db.execute(change)
    db.close()
    r = subprocess.run([*MEMSCOPE, "report", str(record)], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a readable memscope record" in r.stderr, r.stderr


HUP_LOG = r"""
import os, signal, sys, time
log = sys.argv[1]
def note(s, f):
    with open(log, "a") as f:
        f.write(signal.Signals(s).name + "\n")
signal.signal(signal.SIGHUP, note)
open(log + ".ready", "w").close()
time.sleep(4)
"""


@pytest.mark.parametrize("gap", [0.0, 0.03])
def test_one_hangup_sent_twice_reaches_the_run_once(tmp_path, gap):
    # A closed terminal: the kernel sends SIGHUP to the foreground group (memscope) and the shell, which re-sends
    # it to its jobs; `timeout -s HUP` sends memscope one copy and its group another. memscope passed on every
    # copy: the training (in a session of its own, so it got none itself) had two SIGHUPs for one hangup, 6 of 6
    # at 5 and 30 ms apart. SIGTERM's copies were already one press.
    log = tmp_path / "sigs"
    p = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--", PY, "-c", HUP_LOG, str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(600):
            if (tmp_path / "sigs.ready").exists():
                break
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(p.pid, signal.SIGHUP)
        time.sleep(gap)
        os.killpg(p.pid, signal.SIGHUP)  # memscope leads its group here: only memscope is in it
        assert _end(p) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            _end(p)
    assert log.read_text().split() == ["SIGHUP"], log.read_text()
