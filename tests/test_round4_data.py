"""Issue 32, the fourth adversarial round, its data points: prune touches only what is memscope's and nothing still
being written (6), secrets on the command line never reach a record, a page or a label, and records are not
readable by other users (8), bad records and flags are one clear line (9), the words about cut output are true
(10), the old ``memscope.runner`` import still works (11). Real files, real users, real memscope processes."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

from conftest import PY

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
