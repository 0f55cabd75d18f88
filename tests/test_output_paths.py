"""Output files are written the way shell redirection writes them: through symlinks, to FIFOs, devices and
/dev/stdout; a temporary renamed over the path only for a regular file (issue 22, #2)."""

import json
import os
import stat
import subprocess
import threading

import pytest
from conftest import PY, script

MEMSCOPE = [PY, "-m", "memscope.cli"]


def run_clean(tmp_path, summary, **kw):
    argv = [*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", summary]
    return subprocess.run([*argv, script("clean.py"), "0.1"], capture_output=True, text=True, timeout=120, **kw)


def test_a_symlink_is_followed_and_kept(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "summary.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    p = run_clean(tmp_path, str(link))
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["exit"]["cause"] == "ok"
    assert sorted(os.listdir(elsewhere)) == ["summary.json"]  # no temporary left beside the target


def test_a_fifos_reader_gets_the_summary(tmp_path):
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    p = run_clean(tmp_path, str(fifo))
    reader.join(timeout=30)
    assert p.returncode == 0, p.stderr
    assert got and json.loads(got[0])["exit"]["cause"] == "ok"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file renamed over it


@pytest.fixture
def dev_stdout_kept():
    """/dev/stdout is the machine's: a memscope that renames over it (as root) replaces it for every process
    here, so the test puts the link back if it was replaced (and fails)."""
    link = os.readlink("/dev/stdout") if os.path.islink("/dev/stdout") else None
    if link is None:
        pytest.skip("/dev/stdout is not a symlink here")
    yield
    if not os.path.islink("/dev/stdout"):
        os.unlink("/dev/stdout")
        os.symlink(link, "/dev/stdout")
        pytest.fail("memscope replaced /dev/stdout with a file (put back)")


def test_dev_stdout_into_a_pipe(tmp_path, dev_stdout_kept):
    p = run_clean(tmp_path, "/dev/stdout")
    assert p.returncode == 0, p.stderr
    start = p.stdout.index("{\n")  # after the script's own output, which shares the pipe
    s, _ = json.JSONDecoder().raw_decode(p.stdout[start:])
    assert s["exit"]["cause"] == "ok"
    assert "cannot write" not in p.stderr


def test_process_substitution(tmp_path):
    out = tmp_path / "via_cat.json"
    cmd = " ".join([*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs")])
    p = subprocess.run(
        ["bash", "-c", f"{cmd} --summary-json >(cat > {out}) {script('clean.py')} 0.1; wait"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["exit"]["cause"] == "ok"


def test_a_full_device_is_one_line_and_stays_a_device(tmp_path):
    dev = tmp_path / "full"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # what /dev/full is
    except PermissionError:
        pytest.skip("making a device node needs root")
    p = run_clean(tmp_path, str(dev))
    # The CLI's contract: the exit status is the command's own; a summary not written is said once.
    assert p.returncode == 0, p.stderr
    said = [line for line in p.stderr.splitlines() if "cannot write the summary" in line]
    assert len(said) == 1 and "No space left on device" in said[0], p.stderr
    assert "Traceback" not in p.stderr
    st = os.lstat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 7)
    assert [f for f in os.listdir(tmp_path) if f.startswith(".memscope-")] == []


def test_report_html_to_dev_stdout_is_the_page_alone(tmp_path, dev_stdout_kept):
    runs = str(tmp_path / "runs")
    assert run_clean(tmp_path, str(tmp_path / "s.json")).returncode == 0
    p = subprocess.run(
        [*MEMSCOPE, "report", "last", "--record", runs, "--html", "/dev/stdout"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.lstrip().startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>")
    assert "report written to" in p.stderr


def test_a_regular_file_keeps_its_mode(tmp_path):
    out = tmp_path / "s.json"
    out.write_text("old")
    out.chmod(0o640)
    assert run_clean(tmp_path, str(out)).returncode == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640
    assert json.loads(out.read_text())["exit"]["cause"] == "ok"
