"""`memscope ls`'s size and state columns and `memscope prune` on real records (issue 24: records people can
manage)."""

import os
import sqlite3
import subprocess
import time

from conftest import PY, script, wait_for_output

import memscope
from memscope.fmt import fmt_bytes
from memscope.record.catalogue import files_size, list_runs, record_files, run_state

MEMSCOPE = [PY, "-m", "memscope.cli"]


def cli(*args, timeout=60):
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout)


def ended_run(runs):
    r = memscope.run([PY, script("clean.py"), "0.05"], record_dir=runs, output="capture", interval_s=0.05)
    r.wait(60)
    return r


def ls_states(runs):
    """run id -> (state, size column) from `memscope ls`."""
    p = cli("ls", "--record", runs)
    assert p.returncode == 0, p.stderr
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        out[f[0]] = (f[3], line)
    return out


def wait_running(runs, run_id, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ls_states(runs).get(run_id, ("",))[0] == "running":
            return
        time.sleep(0.2)
    raise AssertionError(f"{run_id} never shown running: {ls_states(runs)}")


def set_run(path, sql, *params):
    con = sqlite3.connect(path)
    with con:
        con.execute(sql, params)
    con.close()


def test_ls_shows_size_on_disk_and_state(start, record_dir):
    done = ended_run(record_dir)
    # What may sit beside a record: a kept CUDA snapshot and a Scalene folder, both the run's.
    base = os.path.join(record_dir, done.run_id)
    with open(base + ".cuda_snapshot_1_0.pickle", "wb") as f:
        f.write(b"x" * 300_000)
    os.mkdir(base + "-scalene")  # a Scalene folder is the run's when its record says it ran under Scalene
    set_run(done.record_path, "UPDATE run SET meta=json_set(meta, '$.scalene', 'cpu')")
    with open(base + "-scalene/profile.json", "wb") as f:
        f.write(b"y" * 200_000)
    with open(os.path.join(record_dir, "notes.txt"), "w") as f:
        f.write("mine")
    live = start([script("sleeper.py"), "8"])
    wait_for_output(live, "ready")
    wait_running(record_dir, live.run_id)
    try:
        info = {r.run_id: r for r in list_runs(record_dir)}[done.run_id]
        files = record_files(info)
        on_disk = sorted(os.path.join(record_dir, n) for n in os.listdir(record_dir) if n.startswith(done.run_id))
        assert sorted(files) == on_disk and info.path in files and base + ".cuda_snapshot_1_0.pickle" in files
        expected = sum(os.stat(p).st_size for p in files if os.path.isfile(p)) + 200_000
        assert files_size(files) == expected > 500_000
        states = ls_states(record_dir)
        assert states[done.run_id][0] == "ended" and fmt_bytes(expected) in states[done.run_id][1]
        assert states[live.run_id][0] == "running"
    finally:
        live.kill()


def test_a_reused_pid_is_not_running(record_dir):
    a, b = ended_run(record_dir), ended_run(record_dir)
    # a: its memscope "crashed" (no end) and its root pid is now this test's process, which started at another
    # time than the root the record saw.
    set_run(a.record_path, "UPDATE processes SET pid=? WHERE pid=(SELECT root_pid FROM run)", os.getpid())
    set_run(a.record_path, "UPDATE run SET ended_at=NULL, root_pid=?", os.getpid())
    # b: the same before any round was recorded (no processes row): a fresh process, started after the record.
    fresh = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        set_run(b.record_path, "UPDATE run SET ended_at=NULL, root_pid=?", fresh.pid)
        set_run(b.record_path, "DELETE FROM processes")
        states = {r.run_id: run_state(r) for r in list_runs(record_dir)}
        assert states == {a.run_id: "unfinished", b.run_id: "unfinished"}
        p = cli("prune", "--keep", "0", "--record", record_dir)
        assert p.returncode == 0, p.stderr
        assert "removed 2 runs" in p.stdout and "running" not in p.stdout, p.stdout
        assert os.listdir(record_dir) == []
    finally:
        fresh.kill()
        fresh.wait()


def test_prune_keeps_the_running_run_and_what_is_not_a_record(start, record_dir):
    old, new = ended_run(record_dir), ended_run(record_dir)
    for name in ("notes.txt", "other.sqlite-wal", "not-a-run.pickle"):
        with open(os.path.join(record_dir, name), "w") as f:
            f.write("mine")
    live = start([script("sleeper.py"), "8"])
    wait_for_output(live, "ready")
    wait_running(record_dir, live.run_id)
    try:
        before = sorted(os.listdir(record_dir))
        dry = cli("prune", "--keep", "0", "--dry-run", "--record", record_dir)
        assert dry.returncode == 0, dry.stderr
        assert "would remove 2 runs" in dry.stdout and "skipped 1 running" in dry.stdout, dry.stdout
        assert sorted(os.listdir(record_dir)) == before  # a dry run deletes nothing
        freed = files_size(record_files(list_runs(record_dir)[0])) + files_size(record_files(list_runs(record_dir)[1]))
        p = cli("prune", "--keep", "0", "--record", record_dir)
        assert p.returncode == 0, p.stderr
        last = p.stdout.splitlines()[-1]
        assert last == f"removed 2 runs, freed {fmt_bytes(freed, 'tenth')}; kept 0; skipped 1 running", p.stdout
        left = sorted(os.listdir(record_dir))
        assert not [n for n in left if n.startswith((old.run_id, new.run_id))]
        assert {"notes.txt", "other.sqlite-wal", "not-a-run.pickle", live.run_id + ".sqlite"} <= set(left)
        assert ls_states(record_dir)[live.run_id][0] == "running"
    finally:
        live.kill()


def test_older_than_removes_only_the_old_runs(record_dir):
    old, new = ended_run(record_dir), ended_run(record_dir)
    back = time.time() - 40 * 86400
    set_run(
        old.record_path,
        "UPDATE run SET t0_epoch=?, started_at=?",
        back,
        time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(back)),
    )
    dry = cli("prune", "--older-than", "30d", "--dry-run", "--record", record_dir)
    assert dry.returncode == 0 and f"would remove {old.run_id}" in dry.stdout and new.run_id not in dry.stdout
    assert os.path.exists(old.record_path)
    assert "removed 0 runs" in cli("prune", "--older-than", "41d", "--record", record_dir).stdout
    p = cli("prune", "--older-than", "30d", "--record", record_dir)
    assert p.returncode == 0 and "removed 1 run," in p.stdout and "kept 1" in p.stdout, p.stdout
    assert not os.path.exists(old.record_path) and os.path.exists(new.record_path)
    # --keep 1 with --older-than: the newest stays.
    assert "removed 0 runs" in cli("prune", "--keep", "1", "--older-than", "1s", "--record", record_dir).stdout


def test_bad_input_is_one_line_exit_2_and_nothing_deleted(record_dir):
    r = ended_run(record_dir)
    before = sorted(os.listdir(record_dir))
    for args in (
        [],
        ["--older-than", "30x"],
        ["--older-than", "30"],
        ["--older-than=-3d"],
        ["--keep=-1"],
        ["--keep", "many"],
    ):
        p = cli("prune", *args, "--record", record_dir)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and p.stdout == "", (args, p.stdout, p.stderr)
    p = cli("prune", "--keep", "0", "--record", os.path.join(record_dir, "missing"))
    assert p.returncode == 2 and "no record directory" in p.stderr and p.stderr.count("\n") == 1
    assert sorted(os.listdir(record_dir)) == before and os.path.exists(r.record_path)


def test_a_record_copied_to_another_name_owns_only_its_own_files(record_dir):
    r = ended_run(record_dir)
    copy = os.path.join(record_dir, "copy.sqlite")
    src = sqlite3.connect(r.record_path)
    dst = sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    infos = {os.path.basename(i.path): i for i in list_runs(record_dir)}
    assert {os.path.basename(f) for f in record_files(infos["copy.sqlite"])} <= {
        "copy.sqlite",
        "copy.sqlite-wal",
        "copy.sqlite-shm",
    }
    assert not [f for f in record_files(infos[os.path.basename(r.record_path)]) if "copy" in f]
    p = cli("prune", "--keep", "1", "--record", record_dir)  # the copy has the same id and start: it sorts first
    assert p.returncode == 0 and "removed 1 run," in p.stdout, p.stdout
    left = os.listdir(record_dir)
    # Whichever went, the other's .sqlite is still there: files go by the record's file name, not its row's id.
    assert ("copy.sqlite" in left) != (os.path.basename(r.record_path) in left), left
