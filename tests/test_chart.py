"""The notebook memory chart (memscope.ui.chart): widget state, BokehJS from the wheel, the front-end module.

The real-browser check (JupyterLab + chromium) lives outside these tests; here: Python state and, where node is
installed, the ESM's syntax and its data → columns conversion run by node itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("anywidget")
pytest.importorskip("bokeh")

import bokeh  # noqa: E402
from conftest import apply_chart_message  # noqa: E402

from memscope.model import HostSample, ProcessSeen, ProcMem, TreeSample  # noqa: E402
from memscope.ui import chart as chart_mod  # noqa: E402
from memscope.ui.chart import MemoryChart, bokehjs_loader, bokehjs_source, chart_payload, count_points  # noqa: E402

GiB = 2**30
NODE = shutil.which("node")


def _snapshot(n: int = 50) -> dict:
    t = [i * 0.5 for i in range(n)]
    return {
        "tree_pss_by_role": {
            "main": {"t": t, "y": [GiB + i * 1e6 for i in range(n)]},
            "dataloader_worker": {"t": t, "y": [3e8] * n},
        },
        "main_rss": {"t": t, "y": [1.5 * GiB] * n},
        "host_available": {"t": t, "y": [20 * GiB] * n},
        "limit": {"t": [0.0, t[-1]], "y": [32 * GiB, 32 * GiB]},
        "tree_rss": {"t": t, "y": [2 * GiB] * n},
        "phases": [{"name": "train", "start_s": 0.0, "end_s": 10.0}, ("eval", 10.0, None)],
        "events": [{"t": 1.0, "pid": 1, "kind": "fault", "data": {"text": "x" * 4000}}] * 200,
        "version": 7,
    }


def test_chart_constructs_and_its_state_holds_no_lines():
    """The lines stay out of the widget's state (resent whole at each push, a week's window was ~300 KiB): the
    state carries phases, marks and labels; the lines go as ChartWire messages."""
    snap = _snapshot()
    c = MemoryChart(snap, title="train.py", height=400)
    state = c.get_state()
    assert c.data == chart_payload(snap)
    assert c.data["main_rss"]["y"][0] == 1.5 * GiB and c.data["version"] == 7
    assert "data" not in state and "events" not in c.data  # hundreds of kB the chart does not draw
    assert state["meta"]["phases"] == [["train", 0.0, 10.0], ["eval", 10.0, None]]
    assert set(state["meta"]) == {"phases"}
    assert (state["title"], state["height"], state["rendered_points"]) == ("train.py", 400, 0)
    assert state["_bokeh_version"] == bokeh.__version__ and len(state["_uid"]) == 32
    assert "export default" in state["_esm"]
    json.dumps(state["meta"])  # JSON-able as sent

    c.update({"main_rss": {"t": [0, 1], "y": [1, 2]}})
    assert c.data == {"tree_pss_by_role": {}, "main_rss": {"t": [0, 1], "y": [1, 2]}}
    c.data = {}
    assert c.data == {"tree_pss_by_role": {}}
    assert MemoryChart().data == {"tree_pss_by_role": {}}
    assert MemoryChart(title="a").get_state()["_uid"] != MemoryChart(title="b").get_state()["_uid"]


def test_phases_sent_are_capped():
    c = MemoryChart({"phases": [{"name": "p" * 500, "start_s": i, "end_s": i + 1} for i in range(1000)]})
    assert len(c.meta["phases"]) == 400 and c.meta["phases"][-1][1] == 999
    assert len(c.meta["phases"][0][0]) == 80
    assert len(json.dumps(c.meta)) < 64 * 1024


def _host(t: float, available: int, limit: int) -> HostSample:
    return HostSample(
        t=t,
        total=64 * GiB,
        available=available,
        swap_total=0,
        swap_used=0,
        limit=limit,
        cgroup_usage=None,
        host_oom_kills=0,
        cgroup_oom_kills=0,
    )


def _week_like_series(n_rounds: int, max_points: int = 2000):
    """A RunSeries fed like a live run (three roles, host samples), and its snapshot every 50 rounds."""
    from memscope.ui.series import RunSeries

    rs = RunSeries(max_points=max_points)
    for pid, role in ((1, "main"), (2, "dataloader_worker"), (3, "dataloader_worker")):
        rs.feed(ProcessSeen(t=0.0, pid=pid, ppid=0, role=role, name="python", cmdline="python", create_time=0.0))
    for i in range(n_rounds):
        t = i * 0.2
        procs = tuple(ProcMem(p, rss=(100 + p * 10 + (i * 7 + p) % 13) << 20, pss=(90 + p) << 20) for p in (1, 2, 3))
        rs.feed(TreeSample(t=t, kind="pss", procs=procs))
        rs.feed(_host(t, available=20 * GiB - i * 4096, limit=32 * GiB))
        if i % 50 == 49:
            yield chart_payload(rs.snapshot())


def _as_float32(payload: dict) -> dict:
    from array import array

    out = {}
    for key, (t, y) in chart_mod._keyed(payload).items():
        out[key] = (list(array("f", t)), list(array("f", y)))
    return out


def _apply_all(lines: dict, seq: int, msgs: list) -> tuple[dict, int]:
    for content, buffers in msgs:
        lines, seq = apply_chart_message(lines, seq, content, buffers)
    return lines, seq


def _bytes(msg: tuple) -> int:
    return len(json.dumps(msg[0])) + sum(len(b) for b in msg[1])


def test_wire_sends_only_what_changed_and_rebuilds_the_window(monkeypatch):
    """Issue 24: a push carries the appended or rewritten points, not the window; applied in order they rebuild it,
    through the series' merges (every bucket rewritten); a view that missed some gets the whole window once (sent
    to every view); no message is much over PART_BYTES (a whole window goes in parts, drawn after the last)."""
    monkeypatch.setattr(chart_mod, "PART_BYTES", 8192)  # a window of this test's size in several parts
    wire = chart_mod.ChartWire()
    lines, seq = {}, 0
    sizes, late, late_seq = [], None, None
    for n, payload in enumerate(_week_like_series(12_000)):
        msgs = wire.delta(payload)
        assert msgs and all(m[0].get("more") for m in msgs[:-1]) and not msgs[-1][0].get("more")
        sizes.append(sum(_bytes(m) for m in msgs))
        lines, seq = _apply_all(lines, seq, msgs)
        assert lines == _as_float32(payload), n
        if n == 100:  # a view that joins now holds nothing: deltas do not apply to it until it has the window
            late, late_seq = _apply_all({}, 0, msgs)
            assert late == {} and late_seq == 0
            whole = wire.full()
            late, late_seq = _apply_all({}, 0, whole)
            lines, seq = _apply_all(lines, seq, whole)
            assert late == lines and late_seq == seq == wire.seq
        elif late is not None:
            late, late_seq = _apply_all(late, late_seq, msgs)
    assert late == lines
    assert wire.delta(payload) == []  # nothing new: nothing sent
    full = wire.full()
    # A line (2,000 points: 16,000 bytes of t and y) that does not fit a part travels alone.
    assert len(full) >= 3 and all(_bytes(m) < 16_000 + 2048 for m in full)
    assert _apply_all({}, 0, full)[0] == lines
    # Most pushes are a few points; a merge of buckets resends (about half) a line.
    assert sorted(sizes)[len(sizes) // 2] < 2000 < sum(_bytes(m) for m in full)


def test_wire_drops_a_line_that_went_away():
    wire = chart_mod.ChartWire()
    wire.delta({"main_rss": {"t": [0.0], "y": [1.0]}, "limit": {"t": [0.0], "y": [2.0]}})
    [(content, buffers)] = wire.delta({"main_rss": {"t": [0.0], "y": [1.0]}})
    assert content["keys"] == ["main_rss"] and content["series"] == []
    lines, _ = apply_chart_message({"main_rss": ([0.0], [1.0]), "limit": ([0.0], [2.0])}, 1, content, buffers)
    assert lines == {"main_rss": ([0.0], [1.0])}


def test_payload_tolerates_missing_and_ragged_series():
    p = chart_payload(
        {
            "tree_pss_by_role": {"main": {"t": [0, 1, 2], "y": [5, 6]}, "rank": {}},
            "main_rss": None,
            "limit": {"t": [], "y": []},
            "phases": [("p", 1, 2), "junk", {"name": "q"}],
        }
    )
    assert p["tree_pss_by_role"] == {"main": {"t": [0, 1], "y": [5, 6]}, "rank": {"t": [], "y": []}}
    assert p["main_rss"] == {"t": [], "y": []} and p["limit"] == {"t": [], "y": []}
    assert p["phases"] == [{"name": "p", "start_s": 1.0, "end_s": 2.0}]
    assert chart_payload(p) == p  # idempotent
    assert chart_payload(None) == {"tree_pss_by_role": {}}
    assert count_points(p) == 2


def test_chart_of_a_real_run_series():
    from memscope.ui.series import RunSeries

    series = RunSeries(max_points=200)
    series.feed(
        ProcessSeen(t=0.0, pid=10, ppid=1, role="main", name="python", cmdline="python train.py", create_time=0.0)
    )
    series.feed(
        ProcessSeen(t=0.0, pid=11, ppid=10, role="dataloader_worker", name="python", cmdline="python", create_time=0.0)
    )
    for i in range(1000):
        t = i * 0.2
        series.feed(
            TreeSample(
                t=t,
                kind="pss",
                procs=(
                    ProcMem(10, rss=900 * 2**20 + i * 2**20, pss=600 * 2**20),
                    ProcMem(11, rss=300 * 2**20, pss=100 * 2**20),
                ),
            )
        )
        series.feed(_host(t, available=40 * GiB, limit=16 * GiB))
    c = MemoryChart(series.snapshot())
    roles = c.data["tree_pss_by_role"]
    assert set(roles) == {"main", "dataloader_worker"}
    assert 0 < len(roles["main"]["t"]) <= 200
    assert c.data["limit"]["y"][-1] == 16 * GiB
    assert "events" not in c.data
    assert count_points(c.data) > 100


def test_bokehjs_is_read_from_the_installed_wheel():
    src = bokehjs_source()
    js_dir = Path(bokeh.__file__).parent / "server" / "static" / "js"
    assert src["version"] == bokeh.__version__
    assert src["core"] == (js_dir / "bokeh.min.js").read_text(encoding="utf-8")
    assert src["api"] == (js_dir / "bokeh-api.min.js").read_text(encoding="utf-8")
    assert len(src["core"]) > 500_000 and len(src["api"]) > 50_000
    assert "root.Bokeh = bokeh" in src["core"] or "Bokeh" in src["core"][:5000]
    assert f'"{bokeh.__version__}"' in src["api"]  # the plugin registers into this exact version
    for text in (src["core"], src["api"]):
        assert "cdn.bokeh.org" not in text[:5000]


def test_bokehjs_travels_once_per_kernel_not_per_chart():
    a, b = MemoryChart(_snapshot()), MemoryChart()
    ref_a, ref_b = a.get_state()["_bokehjs"], b.get_state()["_bokehjs"]
    assert ref_a == ref_b == f"IPY_MODEL_{bokehjs_loader().model_id}"
    for c in (a, b):
        assert len(json.dumps(c.get_state(), default=str)) < 300_000  # no BokehJS in a chart's own state
    loader_state = bokehjs_loader().get_state()
    assert loader_state["core"] == bokehjs_source()["core"] and loader_state["api"] == bokehjs_source()["api"]
    assert loader_state["_esm"] == a.get_state()["_esm"]  # one module for both
    old = bokehjs_loader()
    old.close()
    c = MemoryChart()
    assert c._bokehjs is not old and c._bokehjs is bokehjs_loader()


def test_esm_is_in_the_package_and_node_parses_it(tmp_path):
    esm = Path(chart_mod.__file__).with_name("chart.js")
    assert esm.read_text(encoding="utf-8") == chart_mod._ESM
    if NODE is None:
        pytest.skip("node is not installed")
    mjs = tmp_path / "chart.mjs"
    mjs.write_text(chart_mod._ESM, encoding="utf-8")
    r = subprocess.run([NODE, "--check", str(mjs)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_esm_columns_match_the_python_point_count(tmp_path):
    """The module's own data → columns conversion, run by node: point count, stacking, units, phases."""
    mjs = tmp_path / "chart.mjs"
    mjs.write_text(chart_mod._ESM, encoding="utf-8")
    data = chart_payload(_snapshot(40))
    (tmp_path / "data.json").write_text(json.dumps(data))
    script = f"""
      const m = await import({json.dumps(mjs.as_uri())});
      const fs = await import("node:fs");
      const d = JSON.parse(fs.readFileSync({json.dumps(str(tmp_path / "data.json"))}, "utf8"));
      const c = m.columns(d);
      const odd = m.columns({{tree_pss_by_role: {{main: {{t: [0, 2], y: [1048576, 1048576]}}, weird: {{t: [1], y: [2097152]}}}}}});
      console.log(JSON.stringify({{points: c.points, yu: c.yu.name, xu: c.xu.name, present: [...c.present],
        main_hi: c.stackData.main_hi[0], dl_hi: c.stackData.dataloader_worker_hi[0],
        phases: c.phaseData, empty: m.columns({{}}).points, odd_x: odd.stackData.x, odd_other: odd.stackData.other_hi}}));
    """
    r = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["points"] == count_points(data)
    assert out["yu"] == "GiB" and out["xu"] == "s"
    assert {"main", "dataloader_worker", "main_rss", "limit", "host_available", "tree_rss"} <= set(out["present"])
    assert out["main_hi"] == pytest.approx(1.0)
    assert out["dl_hi"] == pytest.approx(1.0 + 3e8 / GiB)  # stacked on main
    assert out["phases"] == [{"name": "train", "left": 0, "right": 10}, {"name": "eval", "left": 10, "right": 19.5}]
    assert out["empty"] == 0
    assert out["odd_x"] == [0, 1, 2]  # roles on different times: the union
    assert out["odd_other"] == [1, 3, 1]  # MiB: "weird" folded into other, stacked on main, only in its span


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_esm_applies_the_wire_messages_to_the_same_window(tmp_path, monkeypatch):
    """chart.js's own applyLines, run by node on ChartWire's messages (buffers as DataViews at odd offsets, as a
    websocket hands them): the window it rebuilds is the kernel's, point for point (float32); a delta on the
    wrong base is refused; the whole window resets a store."""
    import base64

    mjs = tmp_path / "chart.mjs"
    mjs.write_text(chart_mod._ESM, encoding="utf-8")
    monkeypatch.setattr(chart_mod, "PART_BYTES", 8192)  # this test's window in several parts
    wire = chart_mod.ChartWire()
    msgs = []
    for payload in _week_like_series(6_000):
        for content, buffers in wire.delta(payload):
            msgs.append({"content": content, "buffers": [base64.b64encode(b).decode() for b in buffers]})
    full = [{"content": c, "buffers": [base64.b64encode(b).decode() for b in bs]} for c, bs in wire.full()]
    (tmp_path / "msgs.json").write_text(json.dumps({"msgs": msgs, "full": full}))
    script = f"""
      const m = await import({json.dumps(mjs.as_uri())});
      const fs = await import("node:fs");
      const {{ msgs, full }} = JSON.parse(fs.readFileSync({json.dumps(str(tmp_path / "msgs.json"))}, "utf8"));
      const bufs = (x) => x.buffers.map((b) => {{
        const raw = Buffer.from(b, "base64");
        const padded = new Uint8Array(raw.length + 3);
        padded.set(raw, 3);
        return new DataView(padded.buffer, 3, raw.length);
      }});
      const store = {{ seq: 0, lines: {{}}, views: new Set(), whole: false }};
      let applied = 0;
      for (const x of msgs) applied += m.applyLines(store, x.content, bufs(x)) ? 1 : 0;
      const stale = {{ seq: 0, lines: {{}}, views: new Set(), whole: false }};
      const refused = m.applyLines(stale, msgs[msgs.length - 1].content, bufs(msgs[msgs.length - 1]));
      let reset = true;
      for (const x of full) reset = m.applyLines(stale, x.content, bufs(x)) && reset;
      const data = m.chartData(store, {{ phases: [] }});
      console.log(JSON.stringify({{ applied, refused, reset, seq: store.seq, whole: store.whole, lines: store.lines,
        same: JSON.stringify(stale.lines) === JSON.stringify(store.lines), points: m.columns(data).points,
        roles: Object.keys(data.tree_pss_by_role) }}));
    """
    r = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(full) >= 2 and out["applied"] == len(msgs) and out["whole"]
    assert out["refused"] is False and out["reset"] is True and out["same"]
    want = _as_float32(payload)
    assert {k: (v["t"], v["y"]) for k, v in out["lines"].items()} == {
        k: (list(t), list(y)) for k, (t, y) in want.items()
    }
    assert out["points"] == count_points(payload)
    assert out["roles"] == ["main", "dataloader_worker"]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_esm_time_axis_and_phase_labels(tmp_path):
    """Issue 23: the time axis reads s, m:ss or h:mm by what is in view (never "6.78848 min"); phase labels that
    would overlap are skipped, eval phases first (2-px stripes beside their train phase got no label)."""
    mjs = tmp_path / "chart.mjs"
    mjs.write_text(chart_mod._ESM, encoding="utf-8")
    script = f"""
      const m = await import({json.dumps(mjs.as_uri())});
      const f = (a, b, step) => [a, b].map((v) => m.fmtElapsed(v, m.timeFormat(a, b), step));
      const epochs = [];
      for (let e = 0; e < 20; e++) epochs.push({{name: "train", left: 10 * e}}, {{name: "eval", left: 10 * e + 9.5}});
      console.log(JSON.stringify({{
        short: f(0, 50, 10), minutes: f(0, 540, 60), zoomed: f(407.28, 407.36, 0.01), hours: f(0, 4 * 3600, 1800),
        hour_zoom: f(3600, 3900, 60), labels: m.fitLabels(epochs, 3).map((i) => epochs[i].name),
        wide: m.fitLabels(epochs, 100).length, windows: m.WINDOWS.map((w) => w[0]),
      }}));
    """
    r = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["short"] == ["0 s", "50 s"]
    assert out["minutes"] == ["0:00", "9:00"]
    assert out["zoomed"] == ["6:47.28", "6:47.36"]  # the axis that read "6.78848 ... 6.7886 (min)"
    assert out["hours"] == ["0:00", "4:00"]
    assert out["hour_zoom"] == ["1:00:00", "1:05:00"]
    # 3 px a second, 30 px an epoch: "eval" needs about 33 px, so every other one, and no train label between.
    assert set(out["labels"]) == {"eval"} and 8 <= len(out["labels"]) <= 12, out["labels"]
    assert out["wide"] == 40  # room for all: every band labelled
    assert out["windows"][0] == 0  # the whole run by default


def test_a_bigger_window_is_pushed_less_often():
    """A day-long window (~15,000 points) is not resent 4 times a second: the browser redraws all of it."""
    from memscope.ui.dashboard import MAX_PUSH_PERIOD_S, PUSH_PERIOD_S, push_period

    assert push_period(300) == PUSH_PERIOD_S == 0.25
    assert push_period(8000) == 1.0
    assert 1.9 < push_period(15689) < MAX_PUSH_PERIOD_S
    assert push_period(200_000) == MAX_PUSH_PERIOD_S
