"""Two nodes, one job, a real Prometheus: what each node's memscope exported, and the job view read back from it.

Debian's prometheus (started here on 127.0.0.1 with a generated config, a 1 s scrape interval and its own storage
directory) scrapes two `memscope run --prometheus` processes, each standing for one node of
`torchrun --nnodes 2 --node-rank 0|1` (gloo on CPU, rendezvous on 127.0.0.1); rank 1 keeps 1 MiB per step.
"""

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from conftest import PY, free_port, has_torch, script

PROMETHEUS = shutil.which("prometheus")
TORCHRUN = os.path.join(os.path.dirname(PY), "torchrun")
MEMSCOPE = [PY, "-m", "memscope.cli"]
MiB = 1 << 20
JOB = "memscope-ddp-test"


def wait_for(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out:
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def instant(url, promql, at=None):
    q = urllib.parse.urlencode({"query": promql, **({"time": f"{at:.3f}"} if at else {})})
    doc = json.load(urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10))
    assert doc["status"] == "success", doc
    return [(r["metric"], float(r["value"][1])) for r in doc["data"]["result"]]


@pytest.fixture
def prometheus(tmp_path):
    """start(targets) -> the URL of a real Prometheus scraping those 127.0.0.1 ports every second."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    procs = []

    def start(ports):
        port = free_port()
        cfg = tmp_path / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            f"  - job_name: {JOB}\n    static_configs:\n      - targets: [{targets}]\n"
        )
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "prometheus.log", "wb"),
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready():
            if proc.poll() is not None:
                raise AssertionError("prometheus exited: " + (tmp_path / "prometheus.log").read_text()[-500:])
            try:
                return urllib.request.urlopen(url + "/-/ready", timeout=1).status == 200
            except OSError:
                return False

        wait_for(ready, 20, "prometheus to be ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.skipif(not has_torch() or not os.path.exists(TORCHRUN), reason="needs torch and torchrun")
def test_two_nodes_scraped_by_a_real_prometheus_and_the_job_view(prometheus, tmp_path, capsys):
    from memscope.cli import main
    from memscope.errors import ClusterError
    from memscope.record.cluster import load_job
    from memscope.ui.cluster import ClusterView

    ports, master = [free_port(), free_port()], free_port()
    url = prometheus(ports)
    env = dict(os.environ, TRAIN_SECONDS="28", LEAK_RANK="1")
    nodes = []
    t_start = time.monotonic()
    try:
        for r, port in enumerate(ports):
            nodes.append(
                subprocess.Popen(
                    [
                        *MEMSCOPE,
                        "run",
                        "-q",
                        "--record",
                        str(tmp_path / f"runs{r}"),
                        "--prometheus",
                        str(port),
                        "--hostname",
                        f"node-{r}",
                        "--prometheus-linger",
                        "2",
                        "--pss-interval",
                        "0.5",
                        "--",
                        TORCHRUN,
                        "--nnodes",
                        "2",
                        "--nproc-per-node",
                        "1",
                        "--node-rank",
                        str(r),
                        "--master-addr",
                        "127.0.0.1",
                        "--master-port",
                        str(master),
                        script("ddp_nodes.py"),
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )

        # The live job view, opened while the job runs: it refreshes every second until both nodes have ended.
        def both_nodes():
            try:
                job = load_job(url, job=JOB, since="5m")
            except ClusterError:
                return None
            return job if len({p.hostname for p in job.panels if p.rank}) == 2 else None

        first = wait_for(both_nodes, 40, "both nodes' ranks in Prometheus")
        with capsys.disabled():
            print(f"\nboth ranks scraped after {time.monotonic() - t_start:.1f} s")
        assert all(p.exit is None for p in first.panels)
        view = ClusterView(url, job=JOB, since="5m", refresh_s=1.0, first=first)

        outs = [n.communicate(timeout=100)[0] for n in nodes]
        assert [n.returncode for n in nodes] == [0, 0], outs
        assert "rank 0 done" in outs[0] and "rank 1 done" in outs[1]
        with capsys.disabled():
            print(f"both nodes ended after {time.monotonic() - t_start:.1f} s")

        # Exit info of both: scraped during the 2 s each endpoint lingers after its run.
        exits = wait_for(
            lambda: (lambda e: e if len(e) == 2 else None)(
                instant(url, f'last_over_time(memscope_exit_info{{job="{JOB}"}}[5m])')
            ),
            10,
            "both exits",
        )
        assert sorted((m["hostname"], m["cause"], m.get("signal", "")) for m, _ in exits) == [
            ("node-0", "ok", ""),
            ("node-1", "ok", ""),
        ]
        runs = {m["hostname"]: m["run"] for m, _ in exits}
        assert runs["node-0"] != runs["node-1"]  # each node's own memscope, its own run id and record
        for r in (0, 1):
            assert (tmp_path / f"runs{r}" / f"{runs[f'node-{r}']}.sqlite").exists()

        # Each node's ranks and roles: the torchrun launcher (no RANK) is the wrapper, its worker the rank.
        seen = instant(
            url,
            f'group by (hostname, rank, role) (last_over_time(memscope_processes{{job="{JOB}",'
            f'role=~"rank|wrapper"}}[5m]))',
        )
        assert sorted((m["hostname"], m.get("rank", ""), m["role"]) for m, _ in seen) == [
            ("node-0", "", "wrapper"),
            ("node-0", "0", "rank"),
            ("node-1", "", "wrapper"),
            ("node-1", "1", "rank"),
        ]
        pss = dict(
            ((m["hostname"]), v)
            for m, v in instant(
                url,
                f'max by (hostname) (max_over_time(memscope_memory_bytes{{job="{JOB}",role="rank",kind="pss"}}[5m]))',
            )
        )
        assert pss["node-1"] > pss["node-0"] + 150 * MiB  # rank 1 kept ~280 MiB more

        # The planted leak, in rank 1's slope only: what each node exported at its last scrape (the final fit;
        # the verdict is a label, so earlier fits are series of their own).
        last = {}
        doc = json.load(
            urllib.request.urlopen(
                f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": f'memscope_exit_info{{job="{JOB}"}}[5m]'}),
                timeout=10,
            )
        )
        for r in doc["data"]["result"]:
            last[r["metric"]["hostname"]] = float(r["values"][-1][0])
        slopes = {}
        for host, at in sorted(last.items()):
            q = f'memscope_leak_slope_bytes_per_second{{job="{JOB}",hostname="{host}",role="rank"}}'
            ((m, v),) = instant(url, q, at)
            slopes[(m["hostname"], m["rank"])] = (m["verdict"], v)
            with capsys.disabled():
                print(f"\nPromQL at {host}'s last scrape ({at:.3f}): {q}\n  -> {m} {v}")
        verdict, slope = slopes[("node-1", "1")]
        assert verdict == "leak" and 6 * MiB < slope < 12 * MiB, slopes  # 1 MiB per 0.1 s step
        # Rank 0 holds flat once training starts (the fit begins at its model.train(), after torch's import
        # ramp of 8 -> 150 MiB, which on a run this short read as a leak).
        verdict0, slope0 = slopes[("node-0", "0")]
        assert verdict0 == "no_leak" and abs(slope0) < slope / 10, slopes

        # The job view followed the job live and stopped once both had ended.
        wait_for(lambda: view.ended, 15, "the job view to see both exits")
        view._thread.join(5)
        assert not view._thread.is_alive() and view.refreshes >= 3
        assert set(view.charts) == {("node-0", ""), ("node-0", "0"), ("node-1", ""), ("node-1", "1")}
        chart = view.charts[("node-1", "1")].data
        assert list(chart["tree_pss_by_role"]) == ["rank"] and chart["ended"]
        assert max(chart["tree_pss_by_role"]["rank"]["y"]) > 250 * MiB
        row = next(r for r in view.table.value.split("<tr>") if r.startswith("<td>node-1</td><td>1</td>"))
        assert "LEAK" in row and "<td>ok</td>" in row
        assert "2 ended" in view.status.value

        # The static page and the terminal table, from the CLI (in this process: the same code, no second torch).
        capsys.readouterr()
        out = tmp_path / "job.html"
        assert main(["cluster", url, "--job", JOB, "--since", "5m", "--html", str(out)]) == 0
        page = out.read_text()
        assert page.count("memscope-chart") >= 4 and "node-1 rank 1" in page and "LEAK +" in page
        assert "--node-rank 1" in page
        assert main(["cluster", url, "--run", runs["node-1"], "--since", "5m"]) == 0
        text = capsys.readouterr().out
        assert "node-1" in text and "node-0" not in text and "LEAK" in text, text

        # No data, Prometheus down, a bad URL: one line each, exit 2.
        for args, expected in (
            ([url, "--run", "no-such-run", "--since", "5m"], "no memscope data for run='no-such-run'"),
            ([f"http://127.0.0.1:{free_port()}"], "cannot reach Prometheus"),
            (["ftp://x"], "not a Prometheus URL"),
        ):
            assert main(["cluster", *args]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and expected in err, err
        with capsys.disabled():
            print(f"two-node test body: {time.monotonic() - t_start:.1f} s")
    finally:
        for n in nodes:
            if n.poll() is None:
                n.terminate()  # memscope stops its own tree
                n.wait(30)
