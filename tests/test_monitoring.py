"""The Grafana dashboard and the Prometheus rules (`memscope monitoring`), checked the way the mixins check theirs.

- the shipped files (monitoring/) are what the generator makes; the subcommand writes them, bad input gets a line;
- `promtool check rules`, and `promtool test rules` with a firing and a non-firing case for every alert;
- `promtool check metrics` on a real /metrics page of a real `memscope run --prometheus`;
- Debian's Prometheus scraping real runs every second and evaluating the shipped rules: a run leaking toward its
  --limit raises the time-to-limit alerts and the leak alert, a run with spikes only raises none, DataLoader
  copy-on-read raises its own (not a leak, not the limit), a segfault and a real OOM kill in a cgroup the test
  makes raise theirs, an exporter killed while its run was alive raises its own; then every
  dashboard panel's query returns data from that Prometheus (the GPU row excepted: no GPU here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import psutil
import pytest
from conftest import PY, free_port, make_memory_cgroup, script

from memscope.export import monitoring
from memscope.export.monitoring import dashboard as dash
from memscope.export.monitoring.rules import ALERTS, RUNBOOK_BASE, rule_groups

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(ROOT, "monitoring")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
MEMSCOPE = [PY, "-m", "memscope.cli"]
JOB = "memscope-monitoring-test"
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")


# -- the files ---------------------------------------------------------------------------------------------------
def test_the_shipped_files_are_what_the_generator_makes(tmp_path):
    out = subprocess.run([*MEMSCOPE, "monitoring", "--out", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name in (monitoring.DASHBOARD_FILE, monitoring.RULES_FILE):
        written = (tmp_path / name).read_text()
        with open(os.path.join(SHIPPED, name)) as f:
            assert f.read() == written, f"monitoring/{name} is stale: run `memscope monitoring --out monitoring`"
    assert json.loads((tmp_path / monitoring.DASHBOARD_FILE).read_text())["uid"] == dash.UID


def test_bad_output_folder_gets_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = subprocess.run([*MEMSCOPE, "monitoring", "--out", str(blocker)], capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("memscope: cannot write into"), out.stderr
    assert blocker.read_text() == "not a folder"


def _readme_anchors() -> set[str]:
    """GitHub's (and PyPI's) heading ids of README.md: lower case, punctuation dropped, spaces to hyphens."""
    with open(os.path.join(ROOT, "README.md")) as f:
        heads = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_alert_is_actionable_severity_runbook_and_its_labels():
    anchors = _readme_anchors()
    for a in ALERTS:
        assert a.severity in ("info", "warning", "critical")
        assert a.anchor in anchors, f"{a.name}: README.md has no section #{a.anchor}"
        assert "$labels.run" in a.summary or "$labels.instance" in a.summary, a.name
    groups = rule_groups()["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert [r["annotations"]["runbook_url"] for r in alerts] == [f"{RUNBOOK_BASE}#{a.anchor}" for a in ALERTS]
    # Aggregations keep what names the run: no alert loses its run's labels to a `sum` without `by`.
    for g in groups:
        for r in g["rules"]:
            for agg in re.findall(r"\b(sum|max|min|avg)\b\s*(by\s*\([^)]*\))?\s*\(", r["expr"]):
                assert agg[1], f"{r.get('alert') or r.get('record')}: {agg[0]} without by (...)"


def test_dashboard_variables_units_and_gpu_row():
    d = json.loads(monitoring.dashboard_json())
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "job", "hostname", "run", "rank"]
    flat = [p for p in d["panels"] if p["type"] != "row"]
    rows = [p for p in d["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == [dash.GPU_ROW] and rows[0]["collapsed"]
    for p in flat + rows[0]["panels"]:
        assert p["fieldConfig"]["defaults"]["unit"] in ("bytes", "Bps", "s", "none"), p["title"]
        for t in p["targets"]:
            assert "$run" in t["expr"], f"{p['title']}: a query that ignores the chosen run"
    ids = [p["id"] for p in d["panels"]] + [q["id"] for r in rows for q in r["panels"]]
    assert len(ids) == len(set(ids))


# Grafana's published dashboard schema: the TypeScript types of @grafana/schema (npm), the classic dashboard model
# that Grafana generates from its CUE kinds. The dashboard is type-checked as an object literal of that type, so an
# unknown field, a missing one or a wrong type fails (what a JSON Schema would check; none is published).
GRAFANA_SCHEMA = "@grafana/schema@13.2.3"
TS_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "memscope-tests", "grafana-schema-13.2.3")


def _schema_checker() -> str | None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None
    tsc = os.path.join(TS_CACHE, "node_modules", ".bin", "tsc")
    if not os.path.exists(tsc):
        os.makedirs(TS_CACHE, exist_ok=True)
        out = subprocess.run(
            [npm, "install", "-q", "--no-audit", "--no-fund", "--prefix", TS_CACHE, "typescript@5", GRAFANA_SCHEMA],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            return None
    return tsc


def _type_check(dashboard: dict) -> subprocess.CompletedProcess:
    tsc = _schema_checker()
    if tsc is None:
        pytest.skip("node and npm (with the registry reachable) are needed to type-check against @grafana/schema")
    src = os.path.join(TS_CACHE, "check.ts")
    with open(src, "w") as f:
        f.write(
            "import type { Dashboard } from '@grafana/schema/dist/types/raw/dashboard/x/types.gen';\n"
            f"export const dashboard: Dashboard = {json.dumps(dashboard, indent=1)};\n"
        )
    return subprocess.run(
        [tsc, "--noEmit", "--strict", "--skipLibCheck", "--moduleResolution", "node", src],
        capture_output=True,
        text=True,
        cwd=TS_CACHE,
    )


def test_the_dashboard_is_of_grafanas_published_schema():
    ok = _type_check(json.loads(monitoring.dashboard_json()))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # ... and the check can fail: a field Grafana does not know, and a wrong type.
    bad = json.loads(monitoring.dashboard_json())
    bad["panels"][0]["gridPos"]["w"] = "six"
    bad["templating"]["list"][1]["definitionz"] = "x"
    out = _type_check(bad)
    assert out.returncode != 0 and "gridPos" in out.stdout + out.stderr or "w" in out.stdout, out.stdout
    assert "definitionz" in out.stdout


# -- promtool ----------------------------------------------------------------------------------------------------
@needs_promtool
def test_promtool_check_rules():
    out = subprocess.run(
        [PROMTOOL, "check", "rules", os.path.join(SHIPPED, monitoring.RULES_FILE)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rule_groups()['groups'][0]['rules'])} rules found" in out.stdout


L = {"job": "train", "instance": "node1:9464", "run": "r1", "hostname": "node1"}


def _sel(**extra: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in {**L, **extra}.items()) + "}"


def _ann(alert, labels: dict, value: str) -> dict:
    """The alert's annotations as Prometheus renders them for these labels and this humanized value."""

    def render(text: str) -> str:
        text = text.replace("{{ $value | humanizeDuration }}", value)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)

    return {
        "summary": render(alert.summary),
        "description": render(alert.description),
        "runbook_url": f"{RUNBOOK_BASE}#{alert.anchor}",
    }


def _ttl_series(slope_verdict: str, pss: int, slope: int, limit: int = 2_000_000_000) -> list[dict]:
    return [
        {"series": "memscope_memory_bytes" + _sel(rank="", role="main", kind="pss"), "values": f"{pss}x40"},
        {"series": "memscope_memory_bytes" + _sel(rank="", role="dataloader_worker", kind="pss"), "values": "0x40"},
        {
            "series": "memscope_leak_slope_bytes_per_second" + _sel(rank="", role="main", verdict=slope_verdict),
            "values": f"{slope}x40",
        },
        {"series": "memscope_limit_bytes" + _sel(source="flag"), "values": f"{limit}x40"},
    ]


def _case(name: str, series: list[dict], at: str, labels: dict | None, value: str = "") -> dict:
    alert = next(a for a in ALERTS if a.name == name)
    exp = []
    if labels is not None:
        full = {**labels, "severity": alert.severity}
        exp = [{"exp_labels": full, "exp_annotations": _ann(alert, full, value)}]
    return {
        "interval": "15s",
        "input_series": series,
        "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": exp}],
    }


def _growth(kind: str) -> list[dict]:
    return [{"series": "memscope_growth_info" + _sel(rank="0", kind=kind), "values": "1x40"}]


def _exit(cause: str, sig: str = "") -> list[dict]:
    return [{"series": "memscope_exit_info" + _sel(cause=cause, signal=sig), "values": "1x4"}]


def _down(ended: bool) -> list[dict]:
    up = {"job": "train", "instance": "node1:9464"}
    s = [
        {"series": "up" + "{" + ", ".join(f'{k}="{v}"' for k, v in up.items()) + "}", "values": "1 1 1 1 0x30"},
        {"series": "memscope_run_info" + _sel(command="python train.py"), "values": "1 1 1 1"},
    ]
    if ended:
        s.append({"series": "memscope_exit_info" + _sel(cause="ok", signal=""), "values": "_ _ _ 1"})
    return s


RUN_LABELS = dict(L)
# Per alert: (a case where it fires, a case where it must not). Values: 1 GB left at 1 MB/s = 1000 s; 200 MB left
# at 1 MB/s = 200 s.
CASES = {
    "MemscopeMemoryLimitWithin30Minutes": (
        _case(
            "MemscopeMemoryLimitWithin30Minutes",
            _ttl_series("leak", 1_000_000_000, 1_000_000),
            "3m",
            RUN_LABELS,
            "16m 40s",
        ),
        _case("MemscopeMemoryLimitWithin30Minutes", _ttl_series("no_leak", 1_000_000_000, 1_000_000), "3m", None),
    ),
    "MemscopeMemoryLimitWithin5Minutes": (
        _case(
            "MemscopeMemoryLimitWithin5Minutes",
            _ttl_series("leak", 1_800_000_000, 1_000_000),
            "3m",
            RUN_LABELS,
            "3m 20s",
        ),
        _case("MemscopeMemoryLimitWithin5Minutes", _ttl_series("leak", 1_000_000_000, 1_000_000), "3m", None),
    ),
    "MemscopeLeak": (
        _case("MemscopeLeak", _growth("leak"), "3m", {**RUN_LABELS, "rank": "0", "kind": "leak"}),
        _case("MemscopeLeak", _growth("spikes"), "3m", None),
    ),
    "MemscopeDataLoaderCopyOnRead": (
        _case(
            "MemscopeDataLoaderCopyOnRead",
            _growth("copy_on_read"),
            "3m",
            {**RUN_LABELS, "rank": "0", "kind": "copy_on_read"},
        ),
        _case("MemscopeDataLoaderCopyOnRead", _growth("step"), "3m", None),
    ),
    "MemscopeOOMKilled": (
        _case(
            "MemscopeOOMKilled",
            _exit("oom_kill", "SIGKILL"),
            "1m",
            {**RUN_LABELS, "cause": "oom_kill", "signal": "SIGKILL"},
        ),
        _case("MemscopeOOMKilled", _exit("ok"), "1m", None),
    ),
    "MemscopeRunCrashed": (
        _case(
            "MemscopeRunCrashed",
            _exit("segfault", "SIGSEGV"),
            "1m",
            {**RUN_LABELS, "cause": "segfault", "signal": "SIGSEGV"},
        ),
        _case("MemscopeRunCrashed", _exit("stopped_by_user", "SIGINT"), "1m", None),
    ),
    "MemscopeExporterDown": (
        _case("MemscopeExporterDown", _down(ended=False), "4m", {"job": "train", "instance": "node1:9464"}),
        _case("MemscopeExporterDown", _down(ended=True), "4m", None),
    ),
}


def test_every_alert_has_a_firing_and_a_non_firing_case():
    assert set(CASES) == {a.name for a in ALERTS}


@needs_promtool
@pytest.mark.parametrize("name", sorted(CASES))
def test_promtool_test_rules(name, tmp_path):
    firing, quiet = CASES[name]
    spec = {
        "rule_files": [os.path.join(SHIPPED, monitoring.RULES_FILE)],
        "evaluation_interval": "15s",
        "tests": [firing, quiet],
    }
    path = tmp_path / "test.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    out = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # ... and each case can fail: the firing case with no alert expected does.
    broken = dict(firing, alert_rule_test=[dict(firing["alert_rule_test"][0], exp_alerts=[])])
    path.write_text(json.dumps(dict(spec, tests=[broken])))
    assert subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True).returncode != 0


# -- real runs, a real Prometheus ------------------------------------------------------------------------------
def _memscope_run(port: int, args: list[str], tmp, *extra: str, linger: str = "60") -> subprocess.Popen:
    return subprocess.Popen(
        [
            *MEMSCOPE,
            "run",
            "--prometheus",
            f"127.0.0.1:{port}",
            "--prometheus-linger",
            linger,
            "--record",
            str(tmp / "records"),
            "--quiet",
            *extra,
            "--",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _scrape(port: int) -> str | None:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None


def _wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@needs_promtool
def test_promtool_check_metrics_on_a_real_page(tmp_path):
    port = free_port()
    p = _memscope_run(port, [PY, script("leak_spikes.py"), "--seconds", "8", "--spike-mib", "50"], tmp_path, linger="0")
    try:
        page = _wait(lambda: (t := _scrape(port)) and "memscope_memory_bytes" in t and t, 30, "a page with memory")
        out = subprocess.run([PROMTOOL, "check", "metrics"], input=page, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "memscope_run_info" in page and "memscope_processes" in page
    finally:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(60)


def _api(url: str, path: str, **q: str):
    doc = json.load(urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(q)}", timeout=10))
    assert doc["status"] == "success", doc
    return doc["data"]


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """Real runs scraped by a real Prometheus with the shipped rules; every alert seen (firing or pending) while
    they went, by alert name and the command of the run it was about."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("monitoring")
    names = ("leak", "spikes", "segfault", "down", "oom", "cor")
    ports = {n: free_port() for n in names}
    cg = make_memory_cgroup(256 << 20, "monitoring")
    procs: dict[str, subprocess.Popen] = {}
    orphans: list[int] = []
    prom = None
    try:
        # DataLoader copy-on-read, first (its dataset takes a while to build): 3 forked workers over 800k dicts,
        # four epochs of at least 30 s.
        procs["cor"] = _memscope_run(
            ports["cor"], [PY, script("copy_on_read.py"), "dicts", "800000", "3", "4", "30"], tmp
        )
        # 20 MiB/s kept toward a 3 GiB budget: a few minutes to the limit, both time-to-limit alerts.
        procs["leak"] = _memscope_run(
            ports["leak"],
            [PY, script("leak_spikes.py"), "--seconds", "170", "--keep-mib", "2", "--spike-mib", "0"],
            tmp,
            "--limit",
            "3G",
        )
        # 300 MiB validation spikes over a flat floor, the same budget: no alert.
        procs["spikes"] = _memscope_run(
            ports["spikes"],
            [
                PY,
                script("leak_spikes.py"),
                "--seconds",
                "170",
                "--keep-mib",
                "0",
                "--spike-mib",
                "300",
                "--period",
                "3",
                "--spike-s",
                "1",
            ],
            tmp,
            "--limit",
            "3G",
        )
        procs["segfault"] = _memscope_run(ports["segfault"], [PY, script("segfault.py")], tmp)
        procs["down"] = _memscope_run(ports["down"], [PY, script("sleeper.py"), "300"], tmp)
        if cg is not None:
            procs["oom"] = _memscope_run(ports["oom"], [script("oom_in_cgroup.sh"), cg], tmp)
        port = free_port()
        cfg = tmp / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports.values())
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{os.path.join(SHIPPED, monitoring.RULES_FILE)}']\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{targets}]\n"
        )
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "prometheus.log", "wb"),
        )
        url = f"http://127.0.0.1:{port}"
        _wait(lambda: _scrape_ok(url), 30, "prometheus to be ready")
        # The exporter killed while its run goes: once Prometheus has seen the run (a few scrapes), SIGKILL
        # memscope itself; its training (in memscope's session) is stopped by this test afterwards.
        _wait(
            lambda: _api(url, "/api/v1/query", query=f'memscope_run_info{{instance="127.0.0.1:{ports["down"]}"}}')[
                "result"
            ],
            60,
            "the sleeper's run in Prometheus",
        )
        time.sleep(3)
        # memscope runs its training in a session of its own: killing memscope leaves it, stopped below.
        orphans = [c.pid for c in psutil.Process(procs["down"].pid).children(recursive=True)]
        procs["down"].kill()
        seen: dict[tuple[str, str], str] = {}
        want = {
            ("MemscopeMemoryLimitWithin30Minutes", "leak"),
            ("MemscopeMemoryLimitWithin5Minutes", "leak"),
            ("MemscopeRunCrashed", "segfault"),
            ("MemscopeExporterDown", "down"),
            ("MemscopeLeak", "leak"),
            ("MemscopeDataLoaderCopyOnRead", "cor"),
        }
        if cg is not None:
            want.add(("MemscopeOOMKilled", "oom"))
        by_instance = {f"127.0.0.1:{p}": n for n, p in ports.items()}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            for a in _api(url, "/api/v1/alerts")["alerts"]:
                who = by_instance.get(a["labels"].get("instance", ""), "?")
                key = (a["labels"]["alertname"], who)
                if seen.get(key) != "firing":
                    seen[key] = a["state"]
            if all(seen.get(k) == "firing" for k in want):
                break
            time.sleep(1)
        yield {"url": url, "seen": seen, "want": want, "oom": cg is not None}
    finally:
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)  # memscope's session: the run and whatever is left of it
            except ProcessLookupError:
                pass
            p.wait(30)
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        if cg is not None:
            _wait(lambda: _rmdir(cg), 20, "the test's cgroup to empty")


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def _scrape_ok(url: str) -> bool:
    try:
        return urllib.request.urlopen(url + "/-/ready", timeout=1).status == 200
    except OSError:
        return False


def test_real_runs_raise_their_alerts(observed):
    seen = observed["seen"]
    missing = sorted(k for k in observed["want"] if seen.get(k) != "firing")
    assert not missing, f"not fired: {missing}; seen: {seen}"


def test_a_run_with_spikes_only_raises_none(observed):
    about_spikes = {k: v for k, v in observed["seen"].items() if k[1] == "spikes"}
    assert about_spikes == {}, about_spikes


def test_copy_on_read_raises_its_own_alert_not_a_leak_nor_the_limit(observed):
    about_cor = {k[0] for k in observed["seen"] if k[1] == "cor"}
    assert about_cor == {"MemscopeDataLoaderCopyOnRead"}, about_cor


def _concrete(expr: str) -> str:
    """A panel's query with the dashboard's variables at "All" and the range at an hour."""
    return (
        expr.replace("$__range", "1h")
        .replace('"$job"', '".*"')
        .replace('"$hostname"', '".*"')
        .replace('"$run"', '".*"')
        .replace('"$rank"', '".*"')
    )


def test_every_panel_returns_data_from_that_prometheus(observed):
    d = dash.dashboard()
    empty = []
    for p in d["panels"]:
        if p["type"] == "row":
            continue  # the GPU row: GPU only (no GPU here)
        for t in p["targets"]:
            res = _api(observed["url"], "/api/v1/query", query=_concrete(t["expr"]))["result"]
            if not res:
                empty.append((p["title"], t["expr"]))
    assert not empty, empty
    gpu = [q for p in d["panels"] if p["type"] == "row" for q in p["panels"]]
    assert gpu and all(q["description"].startswith("GPU only") for q in gpu)
    # The variables' own queries list the runs seen.
    runs = _api(observed["url"], "/api/v1/label/run/values")
    assert len(runs) >= 4


if __name__ == "__main__":  # regenerate the shipped files
    sys.exit(subprocess.call([*MEMSCOPE, "monitoring", "--out", SHIPPED]))
