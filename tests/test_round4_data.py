"""Issue 32, the fourth adversarial round, its data points: prune touches only what is memscope's and nothing still
being written (6), secrets on the command line never reach a record, a page or a label, and records are not
readable by other users (8), bad records and flags are one clear line (9), the words about cut output are true
(10), the old ``memscope.runner`` import still works (11). Real files, real users, real memscope processes."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time

import pytest
from conftest import PY, free_port, scrape_until

import memscope

MEMSCOPE = [PY, "-m", "memscope.cli"]


def cli(*args: str, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)


# -- 11: last month's API ---------------------------------------------------------------------------------------
def test_the_old_runner_import_still_runs_a_run_and_warns(tmp_path):
    script = tmp_path / "old_api.py"
    script.write_text(
        "import sys\n"
        "from memscope.runner import Run, Options\n"
        f"r = Run([sys.executable, '-c', 'print(41 + 1)'], options=Options(record_dir={str(tmp_path / 'runs')!r},"
        " output='capture')).start()\n"
        "s = r.wait(60)\n"
        "print('cause', s['exit']['cause'], list(r.output_tail))\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "cause ok ['42']" in p.stdout, p.stdout
    # The warning names the script's line, so that a person knows what to change.
    assert f"{script}:2: DeprecationWarning: memscope.runner is deprecated" in p.stderr, p.stderr
    assert "from memscope import Run, Options" in p.stderr


# -- 9: bad records and flags -----------------------------------------------------------------------------------
def ended_record(runs: str, *argv: str) -> str:
    """A real run recorded by a real `memscope run` process; its record's path."""
    p = cli("run", "--quiet", "--record", runs, "--", *(argv or (PY, "-c", "print('done')")))
    assert p.returncode == 0, p.stderr
    (name,) = [n for n in os.listdir(runs) if n.endswith(".sqlite")]
    return os.path.join(runs, name)


def edit_summary(path: str, drop: str) -> None:
    con = sqlite3.connect(path)
    with con:
        s = json.loads(con.execute("SELECT summary FROM run").fetchone()[0])
        del s["exit"][drop]
        con.execute("UPDATE run SET summary=?", (json.dumps(s),))
    con.close()


def test_a_summary_without_its_exit_cause_or_message_reports_and_says_what_it_lacked(tmp_path):
    rec = ended_record(str(tmp_path / "runs"))
    for key in ("cause", "message"):
        bad = str(tmp_path / f"no-{key}.sqlite")
        shutil.copy(rec, bad)
        edit_summary(bad, key)
        text = cli("report", bad)
        assert text.returncode == 0 and "Traceback" not in text.stderr + text.stdout, text.stderr
        assert "memscope: ok — The run finished normally" in text.stdout, text.stdout
        assert f"lacks exit.{key}: this one was computed again from its data" in text.stdout
        js = cli("report", "--json", bad)
        assert js.returncode == 0, js.stderr
        assert json.loads(js.stdout)["exit"]["cause"] == "ok"
        page = cli("report", "--html", str(tmp_path / f"{key}.html"), bad)
        assert page.returncode == 0 and page.stderr == "", page.stderr
        assert "The run finished normally" in (tmp_path / f"{key}.html").read_text()


def test_ls_record_given_a_file_is_one_line_and_exit_2(tmp_path):
    rec = ended_record(str(tmp_path / "runs"))
    p = cli("ls", "--record", rec)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, (p.stdout, p.stderr)
    assert "not a directory" in p.stderr and "memscope report FILE" in p.stderr
    # A directory with no records yet (a new project) is not an error.
    empty = cli("ls", "--record", str(tmp_path / "none"))
    assert empty.returncode == 0 and "no runs recorded" in empty.stdout


def test_sizes_are_1024_based_with_or_without_a_space_and_nonsense_is_one_line(tmp_path):
    from memscope.cli.options import parse_size

    for text in ("12G", "12 G", "12GiB", "12 GiB", "12gb"):
        assert parse_size(text) == 12 * 2**30, text
    for text in ("12 G B", "12GG", "G12", "-1G", "0G", "1e3G", "12 X"):
        p = cli("run", "--limit", text, "--record", str(tmp_path / "runs"), "--", PY, "-c", "pass")
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--limit" in p.stderr, (text, p.stderr)
    assert not os.path.exists(tmp_path / "runs") or not os.listdir(tmp_path / "runs")


# -- 10: what the record kept of a long line --------------------------------------------------------------------
ONE_LINE = r"""
import os, sys
n = int(sys.argv[1])  # MiB
chunk = b"z" * (1 << 20)
for _ in range(n):
    os.write(1, chunk)
os.write(1, b"\nLAST LINE\n")
"""


def test_a_line_longer_than_the_cap_says_what_was_really_kept(start, monkeypatch):
    from memscope.collect import output as output_mod
    from memscope.ui.fragments import verdict_card

    monkeypatch.setattr(output_mod, "MAX_RECORDED", 4 << 20)  # the cap: 32 MiB in a real run, 4 MiB here
    run = start([PY, "-c", ONE_LINE, "24"])  # one line of 24 MiB: 64 KiB of it can be kept
    s = run.wait(90)
    assert s["exit"]["cause"] == "ok", s["exit"]
    out = s["bounded"]["output"]["stdout"]
    assert out["recorded_bytes"] >= 4 << 20 and out["recorded_bytes"] + out["dropped_bytes"] == (24 << 20) + 11
    # What the record holds of the line: 64 Ki characters, whatever was read of it.
    con = sqlite3.connect(s["record"])
    text = "".join(
        json.loads(d)["text"] for (d,) in con.execute("SELECT data FROM events WHERE kind='output'").fetchall()
    )
    con.close()
    head, _, tail = text.partition("[memscope: output past the first 4 MiB not recorded")
    assert head == "z" * (64 << 10) + "\n" and out["kept_bytes"] == 64 << 10, out
    # Then the last lines, 2000 characters of each at most (a line cut by a skip ends there, saying so).
    assert all(line.count("z") <= 2000 for line in tail.splitlines()) and tail.endswith("LAST LINE\n"), tail[:300]
    words = next(w for w in s["warnings"] if "to stdout" in w)
    assert words == (
        "The run wrote 24 MiB to stdout: memscope kept 64 KiB of it and its last lines (lines longer than 64 KiB "
        "are cut); the other 24 MiB was counted, not kept."
    ), words
    assert "recorded the first" not in words and "kept 64 KiB of it" in verdict_card(s)


# -- 6: prune removes only memscope's files, only of records proven finished ------------------------------------
def records_in(runs: str) -> list[str]:
    return sorted(n for n in os.listdir(runs) if n.endswith(".sqlite"))


def test_prune_removes_only_the_files_memscope_wrote_never_a_folder_or_a_link(tmp_path):
    runs, elsewhere = str(tmp_path / "runs"), str(tmp_path / "elsewhere")
    first = ended_record(runs)
    run_id = os.path.basename(first)[: -len(".sqlite")]
    # A second real record, renamed by its user to best.sqlite, beside the user's best.pt and best.d/.
    os.makedirs(elsewhere)
    second = ended_record(elsewhere)
    os.rename(second, os.path.join(runs, "best.sqlite"))
    # A third, kept elsewhere and linked into the directory.
    third = ended_record(str(tmp_path / "third"))
    os.symlink(third, os.path.join(runs, "linked.sqlite"))
    users = {
        f"{run_id}.notes.txt": "my notes",
        f"{run_id}.plots/loss.png": "png",
        "best.pt": "weights",
        "best.d/config.json": "{}",
        "best.sqlite.bak": "the user's backup",
    }
    for name, text in users.items():
        os.makedirs(os.path.dirname(os.path.join(runs, name)), exist_ok=True)
        with open(os.path.join(runs, name), "w") as f:
            f.write(text)
    ours = [f"{run_id}.cuda_snapshot_41_0.pickle", f"{run_id}.stdout"]  # what memscope leaves beside a record
    for name in ours:
        with open(os.path.join(runs, name), "wb") as f:
            f.write(b"x" * 1000)

    p = cli("prune", "--keep", "0", "--record", runs)
    assert p.returncode == 0, p.stderr
    left = set(os.listdir(runs))
    for name, text in users.items():  # every file of the user's, whole
        with open(os.path.join(runs, name)) as f:
            assert f.read() == text, name
    assert not left & {os.path.basename(first), "best.sqlite", *ours}, left
    assert os.path.islink(os.path.join(runs, "linked.sqlite")) and os.path.getsize(third) > 0
    assert "removed 2 runs" in p.stdout and "(0 B)" not in p.stdout and "skipped 1 symbolic link" in p.stdout
    assert f"skipped {os.path.join(runs, 'linked.sqlite')}: a symbolic link" in p.stderr, p.stderr


LEAVES_A_CHILD = r"""
import os, signal, subprocess, sys
# A child in the run's session that ignores SIGTERM: memscope stops it at the end, SIGKILL after --grace.
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(%r, 'w').close(); time.sleep(60)" % (sys.argv[1] + ".child",)])
while not os.path.exists(sys.argv[1] + ".child"):
    pass
open(sys.argv[1], "w").close()
"""


def test_a_run_whose_memscope_is_still_finishing_is_not_pruned(tmp_path):
    runs, mark, summary = str(tmp_path / "runs"), str(tmp_path / "root-done"), str(tmp_path / "s.json")
    ms = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--grace", "6", "--record", runs, "--summary-json", summary, "--"]
        + [PY, "-c", LEAVES_A_CHILD, mark],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        (name,) = records_in(runs)
        run_id = name[: -len(".sqlite")]
        con = sqlite3.connect(f"file:{os.path.join(runs, name)}?mode=ro", uri=True)
        (root,) = con.execute("SELECT root_pid FROM run").fetchone()
        con.close()
        while os.path.exists(f"/proc/{root}") and time.monotonic() < deadline:  # the root has exited, and is reaped
            time.sleep(0.05)
        assert ms.poll() is None, "memscope ended before the leftover's grace"
        ls = cli("ls", "--record", runs)
        assert f"{run_id}  " in ls.stdout and " ending " in ls.stdout, ls.stdout  # not "unfinished"
        rep = cli("report", run_id, "--record", runs)
        assert "memscope is still finishing this record" in rep.stdout, rep.stdout
        p = cli("prune", "--keep", "0", "--record", runs)
        assert p.returncode == 0 and "removed 0 runs" in p.stdout, (p.stdout, p.stderr)
        assert f"kept {run_id}" in p.stderr and "memscope is still writing it" in p.stderr, p.stderr
        assert records_in(runs) == [name]
        assert ms.poll() is None, "prune ran after memscope had ended: nothing was proven"
        out, err = ms.communicate(timeout=60)
        assert ms.returncode == 0, err
    finally:
        if ms.poll() is None:
            ms.kill()
            ms.wait()
    with open(summary) as f:
        s = json.load(f)
    assert s["exit"]["cause"] == "ok" and "OperationalError" not in json.dumps(s), s["exit"]
    assert cli("report", "last", "--record", runs).returncode == 0
    # Finished now: pruned.
    p = cli("prune", "--keep", "0", "--record", runs)
    assert "removed 1 run," in p.stdout and records_in(runs) == [], (p.stdout, p.stderr)


def test_an_unfinished_record_of_a_memscope_that_took_no_lock_is_kept_and_named(tmp_path):
    runs = str(tmp_path / "runs")
    rec = ended_record(runs)
    con = sqlite3.connect(rec)
    with con:  # as an older memscope killed mid-run left it: no end, no lock in its meta
        con.execute("UPDATE run SET ended_at=NULL, meta=json_remove(meta, '$.writer_lock')")
    con.close()
    p = cli("prune", "--keep", "0", "--record", runs)
    assert p.returncode == 0 and "removed 0 runs" in p.stdout and "skipped 1 not proven finished" in p.stdout
    assert "older memscope that took no lock" in p.stderr and os.path.exists(rec), p.stderr


# -- 8: secrets on the command line, and records other users cannot read ----------------------------------------
HF = "hf_" + "Zq9Xw8Vu7Ts6Rr5Qp4On3Mm2Ll1Kk0JjIiHh"  # the shape of a Hugging Face token (made up)
CHILD_SECRET = "Tq7ChildSecret42"  # no known format: only its option's name (--token) says it is one
PASSWORD = "p4ssw0rdXyz"
TRAIN = r"""
import subprocess, sys, time
# A child whose own command line carries a token as a separate argument, and a URL with a password.
c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(float(__import__('sys').argv[1]))", "%s",
                      "--token", "%s", "https://me:%s@example.invalid/x"])
print("ready", flush=True)
c.wait()
"""


def secret_args(seconds: float) -> list[str]:
    return [f"--hf_token={HF}", "--password", PASSWORD, "--seconds", str(seconds)]


def assert_no_secret(where: str, text: str | bytes) -> None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for s in (HF[3:], CHILD_SECRET, PASSWORD):
        assert s not in text, f"{s} in {where}"


def test_secrets_on_command_lines_reach_no_record_summary_report_label_or_page(tmp_path):
    runs, summary = str(tmp_path / "runs"), str(tmp_path / "s.json")
    train = tmp_path / "train.py"
    train.write_text(TRAIN % ("3", CHILD_SECRET, PASSWORD))
    port = free_port()
    ms = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--record", runs, "--summary-json", summary, "--prometheus", f"127.0.0.1:{port}"]
        + ["--prometheus-linger", "5", "--", PY, str(train), *secret_args(3)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        metrics = scrape_until(port)
        time.sleep(1.5)  # the child is seen
        live = cli("report", "last", "--record", runs, "--json")
        out, err = ms.communicate(timeout=90)
    finally:
        if ms.poll() is None:
            ms.kill()
            ms.wait()
    assert ms.returncode == 0, err
    info = next(line for line in metrics.decode().splitlines() if line.startswith("memscope_run_info{"))
    assert "'--hf_token=***' --password '***'" in info, info
    outputs = {"memscope's stdout": out, "memscope's stderr": err, "the label": metrics, "live report": live.stdout}
    with open(summary) as f:
        s = f.read()
    outputs["--summary-json"] = s
    assert "--token ***" in s and "me:***@example.invalid" in s, s  # the child's command line, as recorded
    for args in (["--json"], []):
        p = cli("report", "last", "--record", runs, *args)
        assert p.returncode == 0, p.stderr
        outputs[f"report {args}"] = p.stdout + p.stderr
    page = tmp_path / "r.html"
    assert cli("report", "last", "--record", runs, "--html", str(page)).returncode == 0
    outputs["report --html"] = page.read_bytes()
    outputs["ls"] = cli("ls", "--record", runs).stdout
    for name in os.listdir(runs):  # the record's bytes, its -wal and -shm
        with open(os.path.join(runs, name), "rb") as f:
            outputs[name] = f.read()
    for where, text in outputs.items():
        assert_no_secret(where, text)
    command = json.loads(outputs["report ['--json']"])["command"]
    assert command[-5:] == ["--hf_token=***", "--password", "***", "--seconds", "3"], command


def test_the_dashboard_title_table_and_static_copy_show_no_secret(start, tmp_path):
    from memscope.ui.dashboard import _dashboard_in_cell, reopen

    train = tmp_path / "train.py"
    train.write_text(TRAIN % ("3", CHILD_SECRET, PASSWORD))
    run = start([PY, str(train), *secret_args(3)])
    d = _dashboard_in_cell(run)
    deadline = time.monotonic() + 30
    while "--token ***" not in d.static_html() and time.monotonic() < deadline:  # the child in the table
        time.sleep(0.2)
    assert "--token ***" in d.static_html() and "--hf_token=***" in d.chart.title
    assert_no_secret("the live dashboard's title", d.chart.title)
    assert_no_secret("the live dashboard's static copy (saved in the .ipynb)", d.static_html())
    run.wait(60)
    again = reopen(run.run_id, os.path.dirname(run.record_path))
    assert "--hf_token=***" in again.chart.title
    assert_no_secret("the reopened dashboard's title", again.chart.title)
    assert_no_secret("the reopened dashboard's static copy", again.static_html())


def _python_for(user: str) -> list[str] | None:
    """A Python another user can run with this memscope and its packages on its path (this one may sit in a home
    directory only root can enter), or None."""
    exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(exe, os.X_OK):
        return None
    path = os.pathsep.join([os.path.dirname(os.path.dirname(memscope.__file__)), sysconfig.get_paths()["purelib"]])
    return ["runuser", "-u", user, "--", "env", f"PYTHONPATH={path}", exe]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="making a second user needs root")
def test_another_user_can_read_no_record_output_or_running_report_of_roots_run(tmp_path):
    if not shutil.which("useradd") or not shutil.which("runuser"):
        pytest.skip("no useradd/runuser")
    base = tempfile.mkdtemp(prefix="memscope-perm-", dir="/tmp")
    os.chmod(base, 0o755)  # the other user may enter it (pytest's own tmp_path is root's only)
    user = f"msperm{os.getpid() % 100000}"
    subprocess.run(["useradd", "-M", "-s", "/bin/false", user], check=True, capture_output=True)
    runs_made = []
    try:
        made, shared = os.path.join(base, "made", "runs"), os.path.join(base, "shared")
        os.makedirs(shared, mode=0o755)  # a record directory a person made beforehand, open to all
        os.chmod(shared, 0o755)
        for runs in (made, shared):
            r = memscope.run(
                [PY, "-c", "import time; print('ready', flush=True); time.sleep(60)", *secret_args(60)],
                record_dir=runs,
                output="capture",
                interval_s=0.05,
            )
            runs_made.append(r)
            deadline = time.monotonic() + 30
            while not any("ready" in x for x in list(r.output_tail)) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # rounds written: the -wal and -shm exist
            files = [r.record_path, r.record_path + "-wal", r.record_path + "-shm", *r.output_files]
            for path in files:
                p = subprocess.run(["runuser", "-u", user, "--", "cat", path], capture_output=True, cwd=base)
                assert p.returncode != 0 and p.stdout == b"", f"{user} read {path}: {p.stdout[:60]!r}"
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, (path, oct(os.stat(path).st_mode))
            if runs == made:
                assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
            py = _python_for(user)
            if py is not None:  # memscope itself, as that user, on root's running run
                rep = subprocess.run(
                    [*py, "-m", "memscope", "report", r.record_path, "--json"], capture_output=True, text=True, cwd=base
                )
                assert rep.returncode != 0 and rep.stdout == "", f"{user} reported root's run: {rep.stdout[:200]}"
                assert rep.stderr.count("\n") == 1, rep.stderr
                print(user, "report:", rep.stderr.strip())
                ls = subprocess.run([*py, "-m", "memscope", "ls", "--record", runs], capture_output=True, text=True)
                assert r.run_id not in ls.stdout, ls.stdout
                assert_no_secret("another user's report", rep.stdout + rep.stderr + ls.stdout + ls.stderr)
    finally:
        for r in runs_made:
            r.kill()
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_the_redaction_list_secrets_masked_and_look_alikes_left():
    from memscope.redact import redact_argv, redact_text

    cases = {
        ("t.py", f"--hf_token={HF}"): ["t.py", "--hf_token=***"],
        ("t.py", "--token", "abc", "--max-tokens", "20", "--token-file", "/k/f", "--tokenizer", "gpt2"): [
            "t.py",
            "--token",
            "***",
            "--max-tokens",
            "20",
            "--token-file",
            "/k/f",
            "--tokenizer",
            "gpt2",
        ],
        ("t.py", "--password", "pw", "--api-key", "k", "--pad-token-id", "0"): [
            "t.py",
            "--password",
            "***",
            "--api-key",
            "***",
            "--pad-token-id",
            "0",
        ],
        ("env", "OPENAI_API_KEY=abc", "AWS_SECRET_ACCESS_KEY=x", "trainer.wandb_key=y", "lr=3"): [
            "env",
            "OPENAI_API_KEY=***",
            "AWS_SECRET_ACCESS_KEY=***",
            "trainer.wandb_key=***",
            "lr=3",
        ],
        ("git", "clone", "https://me:hunter2@host/x.git", "https://host/y"): [
            "git",
            "clone",
            "https://me:***@host/x.git",
            "https://host/y",
        ],
        ("t.py", "sk-proj-" + "a" * 30, "ghp_" + "b" * 36, "xoxb-123456789012-abc", "AKIAABCDEFGHIJKLMNOP"): [
            "t.py",
            "sk-***",
            "ghp_***",
            "xoxb-***",
            "AKIA***",
        ],
        ("t.py", "/data/hf_cache/x", "--task-name", "sk-learn"): [
            "t.py",
            "/data/hf_cache/x",
            "--task-name",
            "sk-learn",
        ],
    }
    for argv, want in cases.items():
        assert redact_argv(argv) == want, argv
    shell = f"python t.py --token 'a b' --hf_token {HF} HF_TOKEN=x -H 'Authorization: Bearer abcdefgh123'"
    assert redact_text(shell) == (
        "python t.py --token '***' --hf_token *** HF_TOKEN=*** -H 'Authorization: Bearer ***'"
    ), redact_text(shell)
    assert redact_argv(redact_argv(["t.py", "--token", "x"])) == ["t.py", "--token", "***"]  # idempotent


def test_a_kept_cuda_snapshot_is_as_private_as_the_record(tmp_path):
    from memscope.collect.gpu import keep_snapshot

    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    snap = agent_dir / "cuda_snapshot_41_0.pickle"
    snap.write_bytes(b"frames")
    os.chmod(snap, 0o644)  # as the agent writes it under umask 022
    dest = keep_snapshot(str(snap), str(tmp_path / "r.sqlite"))
    assert dest == str(tmp_path / "r.cuda_snapshot_41_0.pickle")
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o600


def test_redaction_is_linear_in_a_long_command_line():
    # A `python -c` program of 1 MiB (what /proc gives of a command line at most): the URL rule once scanned on
    # from every letter of a long word (quadratic: 200 KiB of letters took 146 s). A hang guard, not a timing.
    code = "; ".join(["a" * 300_000, "x.y-z+" * 50_000, "k=v " * 50_000, f"--token {HF}"])
    p = subprocess.run(  # on stdin: one argument of the command line of a process is 128 KiB at most
        [
            PY,
            "-c",
            "import sys; from memscope.redact import redact_argv; print(redact_argv(sys.stdin.read().split('\\0'))[-1][-12:])",
        ],
        input="\0".join(["python", "-c", code]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout.strip() == "--token ***", (p.stdout[-200:], p.stderr[-500:])
