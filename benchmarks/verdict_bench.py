"""The verdict as an instrument: real scenarios recorded once, re-judged in seconds by the code of this checkout.

    python benchmarks/verdict_bench.py --run [--corpus /work/corpus] [--only NAME ...] [--repeats 3]
    python benchmarks/verdict_bench.py --replay /work/corpus [--every 3] [--out table.md] [--json runs.json]
    python benchmarks/verdict_bench.py --quick          # CI smoke: one short scenario, recorded and replayed

``--run`` (the corpus maker) runs every scenario of ``benchmarks/scenarios/`` under ``memscope run`` (recorded),
on a machine left as it is ("quiet": on a shared machine, not quiet: the load average at each run's start and end
goes into the manifest) and with both cores kept busy by two spinning processes, ``--repeats`` times each, two
runs at a time. Each run's record, summary and output go to ``<corpus>/<scenario>/<load>-<repeat>/``, one line to
``<corpus>/manifest.json`` (see ``MANIFEST_FORMAT``).

``--replay`` re-judges every record of a corpus with the code it runs with (``PYTHONPATH``): the final summary's
verdict and growth kind (``leak.growth``, where the code has it), and the live verdict as the dashboard would have
shown it, on the record's prefixes every ``--every`` seconds (:func:`live_at`: the record cut at that time, read
by the same reader and judged by the same summary code the live line agrees with). Per scenario: right verdict
k/N, right growth kind k/N, median time to the first right live verdict, most live changes in a run, final cards
that contradict the last live line; then the precision and recall of ``leak`` over every run.

Each scenario declares its truth at its top, ``TRUTH = {"verdict": ..., "growth": ..., "seconds": ...}``, and
prints a ``TRUTH key=value ...`` line at its end with what it really did (the rate it kept, each step's size).
"""

from __future__ import annotations

import argparse
import ast
import glob
import importlib
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios")
DEFAULT_CORPUS = "/work/corpus"
LOADS = ("quiet", "busy")
QUICK_SCENARIO = "torch_leak_spikes"
QUICK_SECONDS = 25.0

# One OpenMP thread: on a shared 2-core machine torch's threads spin against each other and everyone else's (a tiny
# BERT's training step took 3 s with the default 2 threads at a load average of 11, 0.2 s with one).
RUN_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "UV_OFFLINE": "1"}

MANIFEST_FORMAT = {
    "scenario": "file name in benchmarks/scenarios/, without .py",
    "load": "quiet (the machine as it is: shared, see the load figures) or busy (+2 spinning processes)",
    "repeat": "1..N",
    "record": "path of the run's SQLite record",
    "summary": "path of the summary memscope wrote at the end (the code that recorded it)",
    "output": "path of the run's output (stdout and stderr)",
    "truth": "the scenario's TRUTH dict, plus 'measured': the TRUTH line it printed",
    "command": "the command run under memscope",
    "env": "what the run's environment had set beside the caller's",
    "wall_s": "wall time of `memscope run`, s",
    "loadavg_start": "1-min load average at the run's start",
    "loadavg_end": "1-min load average at the run's end",
    "started_at": "UTC, ISO 8601",
    "returncode": "exit status of `memscope run`",
}


# -- scenarios ---------------------------------------------------------------------------------------------------
def truth_of(path: str) -> dict[str, Any]:
    """The ``TRUTH = {...}`` literal at a scenario's top, read without running it."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TRUTH" for t in node.targets):
            value: dict[str, Any] = ast.literal_eval(node.value)
            return value
    raise ValueError(f"{path} declares no TRUTH")


def scenarios() -> dict[str, dict[str, Any]]:
    """name -> TRUTH, for every scenario file."""
    out = {}
    for path in sorted(glob.glob(os.path.join(SCENARIOS, "*.py"))):
        name = os.path.basename(path)[:-3]
        if not name.startswith("_"):
            out[name] = truth_of(path)
    return out


def command(name: str, truth: dict[str, Any], seconds: float | None = None) -> list[str]:
    """The command that runs a scenario: its script with this Python, behind its wrapper if it has one."""
    script = os.path.join(SCENARIOS, name + ".py")
    args = ["--seconds", f"{seconds:g}"] if seconds else []
    wrapper = truth.get("wrapper")
    if wrapper == "bash":
        # Not `bash -c 'python ...'` alone: bash would exec python in its place. A wrapper that stays, as a
        # train.sh does.
        line = " ".join([sys.executable, script, *args])
        return ["bash", "-c", f'echo "train.sh: starting"; {line}; rc=$?; echo "train.sh: done ($rc)"; exit $rc']
    if wrapper == "uv":
        uv = os.path.join(os.path.dirname(sys.executable), "uv")
        return [uv, "run", "--no-project", "--offline", "--python", sys.executable, "python", script, *args]
    return [sys.executable, script, *args]


# -- the corpus maker --------------------------------------------------------------------------------------------
def _loadavg() -> float:
    return os.getloadavg()[0]


def _measured(output: str) -> dict[str, float]:
    line = next((x for x in reversed(output.splitlines()) if x.startswith("TRUTH ")), "")
    return {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", line)}


def record_one(
    corpus: str, name: str, truth: dict[str, Any], load: str, repeat: int, seconds: float | None
) -> dict[str, Any]:
    """Run one scenario under ``memscope run`` into ``<corpus>/<name>/<load>-<repeat>/``; its manifest entry."""
    d = os.path.join(corpus, name, f"{load}-{repeat}")
    os.makedirs(d, exist_ok=True)
    for old in glob.glob(os.path.join(d, "*.sqlite*")):
        os.remove(old)
    cmd = command(name, truth, seconds)
    summary, output = os.path.join(d, "summary.json"), os.path.join(d, "output.txt")
    memscope = [sys.executable, "-m", "memscope", "run", "-q", "--record", d, "--summary-json", summary, "--"]
    env = dict(os.environ, **RUN_ENV)
    started, l0, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), _loadavg(), time.monotonic()
    with open(output, "w") as out:
        p = subprocess.run(memscope + cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=600)
    wall, l1 = time.monotonic() - t0, _loadavg()
    with open(output, errors="replace") as f:
        text = f.read()
    records = glob.glob(os.path.join(d, "*.sqlite"))
    return {
        "scenario": name,
        "load": load,
        "repeat": repeat,
        "record": records[0] if records else None,
        "summary": summary,
        "output": output,
        "truth": {**truth, "measured": _measured(text)},
        "command": cmd,
        "env": RUN_ENV,
        "wall_s": round(wall, 1),
        "loadavg_start": round(l0, 2),
        "loadavg_end": round(l1, 2),
        "started_at": started,
        "returncode": p.returncode,
    }


class Spinners:
    """Two processes that keep both cores busy, started and killed by us (by their pids)."""

    def __enter__(self) -> "Spinners":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _manifest_path(corpus: str) -> str:
    return os.path.join(corpus, "manifest.json")


def read_manifest(corpus: str) -> list[dict[str, Any]]:
    try:
        with open(_manifest_path(corpus)) as f:
            runs: list[dict[str, Any]] = json.load(f)["runs"]
            return runs
    except FileNotFoundError:
        return []


def _write_manifest(corpus: str, runs: list[dict[str, Any]]) -> None:
    runs = sorted(runs, key=lambda r: (r["scenario"], r["load"], r["repeat"]))
    tmp = _manifest_path(corpus) + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"format": MANIFEST_FORMAT, "runs": runs}, f, indent=1)
    os.replace(tmp, _manifest_path(corpus))


def make_corpus(
    corpus: str, names: list[str], loads: list[str], repeats: int, jobs: int, seconds: float | None
) -> None:
    """Record every (scenario, load, repeat) not yet in the manifest, ``jobs`` at a time, the busy ones while the
    spinners run; the manifest is rewritten after each run (a cut-off corpus keeps what it has)."""
    os.makedirs(corpus, exist_ok=True)
    truths = scenarios()
    runs = read_manifest(corpus)
    lock = threading.Lock()
    for load in loads:
        have = {(r["scenario"], r["repeat"]) for r in runs if r["load"] == load and r.get("returncode") == 0}
        todo = [(n, k) for k in range(1, repeats + 1) for n in names if (n, k) not in have]
        if not todo:
            continue

        def work(item: tuple[str, int], load: str = load) -> None:
            name, k = item
            entry = record_one(corpus, name, truths[name], load, k, seconds)
            with lock:
                runs[:] = [r for r in runs if (r["scenario"], r["load"], r["repeat"]) != (name, load, k)]
                runs.append(entry)
                _write_manifest(corpus, runs)
            print(
                f"{name} {load}-{k}: rc {entry['returncode']}, {entry['wall_s']:.0f} s, load "
                f"{entry['loadavg_start']:.2f} -> {entry['loadavg_end']:.2f}",
                file=sys.stderr,
                flush=True,
            )

        from concurrent.futures import ThreadPoolExecutor

        spin = Spinners() if load == "busy" else None
        if spin:
            spin.__enter__()
        try:
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(work, todo))
        finally:
            if spin:
                spin.__exit__()


# -- the replay --------------------------------------------------------------------------------------------------
def _prefix_views(con: sqlite3.Connection, end: float) -> None:
    """Make ``con`` read the record as it stood at ``end`` s: TEMP views that shadow its tables (SQLite resolves an
    unqualified name in ``temp`` first), so the reader and the summary code read the prefix unchanged."""
    for v in ("samples", "host", "events", "processes", "run", "peaks"):
        con.execute(f"DROP VIEW IF EXISTS temp.{v}")
    e = repr(float(end))
    con.execute(f"CREATE TEMP VIEW samples AS SELECT * FROM main.samples WHERE t <= {e}")
    con.execute(f"CREATE TEMP VIEW host AS SELECT * FROM main.host WHERE t <= {e}")
    # The exit and the run's end are not known yet; nor the stored summary.
    con.execute(f"CREATE TEMP VIEW events AS SELECT * FROM main.events WHERE t <= {e} AND kind NOT IN ('exit_status')")
    cols = [r[1] for r in con.execute("PRAGMA main.table_info(processes)")]
    later = {"exit_t", "exit_code", "exit_signal"}
    sel = ", ".join(f"CASE WHEN exit_t <= {e} THEN {c} END AS {c}" if c in later else c for c in cols)
    con.execute(
        f"CREATE TEMP VIEW processes AS SELECT {sel} FROM main.processes WHERE first_t IS NULL OR first_t <= {e}"
    )
    cols = [r[1] for r in con.execute("PRAGMA main.table_info(run)")]
    unknown = {"ended_at", "duration_s", "exit_cause", "summary"}
    sel = ", ".join(f"NULL AS {c}" if c in unknown else c for c in cols)
    con.execute(f"CREATE TEMP VIEW run AS SELECT {sel} FROM main.run")
    if con.execute("SELECT 1 FROM main.sqlite_master WHERE name='peaks'").fetchone():
        con.execute(
            "CREATE TEMP VIEW peaks AS "
            f"SELECT pid, 'rss' AS col, MAX(rss) AS value, MAX(t) AS t FROM main.samples WHERE t <= {e} GROUP BY pid "
            f"UNION ALL SELECT pid, 'pss', MAX(pss), MAX(t) FROM main.samples WHERE t <= {e} AND pss IS NOT NULL "
            "GROUP BY pid "
            f"UNION ALL SELECT pid, 'est', MAX(COALESCE(est_pss, pss)), MAX(t) FROM main.samples WHERE t <= {e} "
            "GROUP BY pid"
        )


def kind_of(growth: Any) -> str | None:
    """The growth kind of a summary's or a live view's ``growth`` (a dict with its kind, or the kind's name)."""
    if isinstance(growth, dict):
        kind = growth.get("kind")
        return kind if isinstance(kind, str) else None
    return growth if isinstance(growth, str) else None


def _judged(leak: dict[str, Any]) -> dict[str, Any]:
    """What the replay keeps of a summary's leak section: the verdict, the growth kind (None: this code names
    none), the pace and the words."""
    return {
        "verdict": leak.get("verdict"),
        "growth": kind_of(leak.get("growth")),
        "slope_bytes_per_s": leak.get("slope_bytes_per_s"),
        "reason": leak.get("reason"),
    }


def _summary_leak(rd: Any) -> dict[str, Any]:
    from memscope.analysis.summary import summarize

    leak: dict[str, Any] = dict(summarize(rd).get("leak") or {})
    return leak


def live_at(record: str, end: float, con: sqlite3.Connection | None = None) -> dict[str, Any]:
    """The live verdict at ``end`` s of a recorded run, as the dashboard would have shown it then: the record cut
    at ``end`` and judged by this checkout's summary code, whose leak verdict is the live line's (the dashboard
    and the summary both call ``analysis.leak.fit_plan`` / ``run_verdict`` on the same series). The one place to
    change where the live view moves."""
    from memscope.record.reader import RunData, connect

    own = con is None
    con = con or connect(record, readonly=True)
    try:
        _prefix_views(con, end)
        return _judged(_summary_leak(RunData(record, con=con)))
    finally:
        if own:
            con.close()


def final_of(record: str) -> dict[str, Any]:
    """The final card's verdict, summarized again from the whole record by this checkout's code."""
    from memscope.record.reader import RunData

    rd = RunData(record)
    try:
        return _judged(_summary_leak(rd))
    finally:
        rd.close()


def _duration(record: str) -> float:
    con = sqlite3.connect(f"file:{record}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT MAX(t) FROM samples").fetchone()
        return float(row[0] or 0.0)
    finally:
        con.close()


def _checkout_replay() -> Any:
    """The checkout's own replay of a live line (``memscope.session.verdict.replay``), None where it has none."""
    try:  # by name: a checkout before the live verdict moved there has no such module
        return getattr(importlib.import_module("memscope.session.verdict"), "replay", None)
    except ImportError:
        return None


def _dashboard_line(record: str, every: float) -> list[dict[str, Any]]:
    """The live line of a checkout whose dashboard fits the verdict itself (main at 51a2bed: ``ui/dashboard.py``
    ``_live_leak``): at every refit, ``leak.fit_plan`` and ``leak.run_verdict`` on the series so far (the tree's
    private memory at every RSS round, the main's own private memory, each process's private floor, the phase
    and epoch events), nothing held between refits. The series are read once and cut at each moment."""
    from bisect import bisect_right

    from memscope.analysis.leak import fit_plan, run_verdict
    from memscope.analysis.supervision import main_pid
    from memscope.record.reader import RunData

    rd = RunData(record)
    try:
        rows = rd.fast_totals(private=True)
        main = main_pid(rd.processes(), rd.run_row()["root_pid"])
        events = sorted(rd.events("epoch") + rd.events("phase"), key=lambda e: e["t"])
        own = rd.role_fast_total("main", column="private")
        procs = rd.process_fast_floors(0.2)
    finally:
        rd.close()
    t, y = [r[0] for r in rows], [r[1] or 0 for r in rows]

    def cut(ts: list[float], ys: list[Any], end: float) -> tuple[list[float], list[Any]]:
        k = bisect_right(ts, end)
        return ts[:k], ys[:k]

    out, end = [], every
    while t and end <= t[-1]:
        tt, ty = cut(t, y, end)
        plan = fit_plan([e for e in events if e["t"] <= end], tt[-1], main)
        parts = {p: (r, *cut(pt, py, end)) for p, (r, pt, py) in procs.items()}
        v = run_verdict(plan, (tt, ty), cut(*own, end) if own else None, parts)[0].to_dict()
        out.append({"t": end, "verdict": v.get("verdict"), "growth": kind_of(v.get("growth"))})
        end += every
    return out


def live_line(record: str, every: float, how: str = "auto") -> list[dict[str, Any]]:
    """The live line the run would have shown, every ``every`` s: [{t, verdict, growth}]. ``auto``: where the
    checkout has a live verdict of its own that replays a record (``memscope.session.verdict.replay``: refits held
    against flip-flops, a stateful line), that one, an answer counting as shown once it has a growth kind; else
    the dashboard's own calls on the series so far (:func:`_dashboard_line`). ``prefix``: the record cut at each
    moment and judged by the checkout's whole summary (:func:`live_at`; slower, for any code)."""
    checkout = _checkout_replay() if how == "auto" else None
    if checkout is not None:
        out = []
        for t, v in checkout(record, every):
            kind = kind_of(v.get("growth"))
            out.append({"t": t, "verdict": v.get("verdict") if kind else "insufficient_data", "growth": kind})
        return out
    if how == "auto":
        return _dashboard_line(record, every)
    from memscope.record.reader import connect

    dur, out, end = _duration(record), [], every
    con = connect(record, readonly=True)
    try:
        while end <= dur:
            v = live_at(record, end, con)
            out.append({"t": end, "verdict": v["verdict"], "growth": v["growth"]})
            end += every
    finally:
        con.close()
    return out


def stall_captures(record: str) -> int:
    """Stack captures the recording memscope took for a stall, live (the record's own: no replay re-decides them)."""
    con = sqlite3.connect(f"file:{record}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT data FROM events WHERE kind='stacks'").fetchall()
    finally:
        con.close()
    n = 0
    for (data,) in rows:
        try:
            n += json.loads(data).get("reason") == "stall"
        except (ValueError, AttributeError):
            pass
    return n


def replay_run(entry: dict[str, Any], every: float, how: str = "auto") -> dict[str, Any]:
    """One run re-judged: its final verdict and its live line over time."""
    record = entry["record"]
    t0, c0 = time.perf_counter(), time.process_time()
    final = final_of(record)
    live = live_line(record, every, how)
    return {
        **entry,
        "final": final,
        "live": live,
        "duration_s": _duration(record),
        "stall_captures": stall_captures(record),
        "replay_s": time.perf_counter() - t0,
        "replay_cpu_s": time.process_time() - c0,
    }


def right_kind(kind: str | None, truth: dict[str, Any]) -> bool:
    """The growth kind is the truth's, or one the scenario also accepts (``growth_also``: a run the words fit
    either way, e.g. a clean run whose evaluation workers add a few MiB while they live)."""
    return kind is not None and (kind == truth.get("growth") or kind in truth.get("growth_also", ()))


def live_stats(live: list[dict[str, Any]], truth: dict[str, Any], final: dict[str, Any]) -> dict[str, Any]:
    """Changes of the live verdict after its first answer, time to the first right one, whether the final card
    contradicts the last live line."""
    answered = [
        x
        for x in live
        if x["verdict"] != "insufficient_data"
        or any(y["verdict"] != "insufficient_data" for y in live[: live.index(x)])
    ]
    changes = sum(1 for a, b in zip(answered, answered[1:]) if a["verdict"] != b["verdict"])
    kind_changes = sum(1 for a, b in zip(answered, answered[1:]) if a["growth"] != b["growth"])
    first_right = next((x["t"] for x in live if x["verdict"] == truth["verdict"]), None)
    first_kind = next((x["t"] for x in live if right_kind(x["growth"], truth)), None)
    last = live[-1] if live else None
    shown = bool(last and last["verdict"] != "insufficient_data")
    contradicts = bool(shown and last and last["verdict"] != final["verdict"])
    kind_differs = bool(shown and last and (last["growth"] or None) != (final["growth"] or None))
    return {
        "changes": changes,
        "kind_changes": kind_changes,
        "first_right_s": first_right,
        "first_right_kind_s": first_kind,
        "contradicts": contradicts,
        "kind_differs": kind_differs,
        "sequence": _sequence(live),
    }


def _sequence(live: list[dict[str, Any]]) -> str:
    """The live line as runs of one verdict: "insufficient_data@3 no_leak/flat@21 leak/leak@45"."""
    out, prev = [], None
    for x in live:
        cur = x["verdict"] + (f"/{x['growth']}" if x["growth"] else "")
        if cur != prev:
            out.append(f"{cur}@{x['t']:.0f}")
            prev = cur
    return " ".join(out)


def replay(
    corpus: str, every: float, workers: int, only: list[str] | None = None, how: str = "auto"
) -> list[dict[str, Any]]:
    runs = [r for r in read_manifest(corpus) if r.get("record") and os.path.exists(r["record"])]
    runs = [r for r in runs if not only or r["scenario"] in only]
    with ProcessPoolExecutor(max(1, workers)) as pool:
        done = list(pool.map(replay_run, runs, [every] * len(runs), [how] * len(runs)))
    for r in done:
        r["stats"] = live_stats(r["live"], r["truth"], r["final"])
    return done


# -- the table ---------------------------------------------------------------------------------------------------
def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "-"


def table(done: list[dict[str, Any]]) -> str:
    """Per scenario: right verdict and kind k/N (quiet, busy), median time to the first right live verdict, the
    most live changes in a run, contradicted cards; then the precision and recall of ``leak``."""
    has_growth = any(r["final"]["growth"] is not None for r in done)
    lines = [
        "| scenario | truth | right verdict | right kind | final verdicts | median first right s: verdict, kind | "
        "max live changes | card ≠ last live line: verdict, kind |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in done:
        by.setdefault(r["scenario"], []).append(r)
    for name in sorted(by):
        rs = by[name]
        truth = rs[0]["truth"]

        def right(load: str | None, key: str, rs: list[dict[str, Any]] = rs) -> tuple[int, int]:
            sel = [r for r in rs if load is None or r["load"] == load]
            if key == "growth":
                return sum(1 for r in sel if right_kind(r["final"]["growth"], r["truth"])), len(sel)
            return sum(1 for r in sel if r["final"][key] == r["truth"][key]), len(sel)

        def cell(key: str) -> str:
            k, n = right(None, key)
            parts = ", ".join(f"{ld} {_frac(*right(ld, key))}" for ld in LOADS if right(ld, key)[1])
            return f"{'**' if k < n else ''}{k}/{n}{'**' if k < n else ''} ({parts})"

        finals: dict[str, int] = {}
        for r in rs:
            f = r["final"]["verdict"] + (f"/{r['final']['growth']}" if r["final"]["growth"] else "")
            finals[f] = finals.get(f, 0) + 1

        def median_first(key: str, rs: list[dict[str, Any]] = rs) -> str:
            firsts = [r["stats"][key] for r in rs if r["stats"][key] is not None]
            if not firsts:
                return "never"
            return f"{statistics.median(firsts):.0f}" + (f" ({len(firsts)}/{len(rs)})" if len(firsts) < len(rs) else "")

        med = median_first("first_right_s") + (f", {median_first('first_right_kind_s')}" if has_growth else "")
        lines.append(
            f"| {name} | {truth['verdict']}/{' or '.join([truth.get('growth'), *truth.get('growth_also', ())])} | {cell('verdict')} | "
            f"{cell('growth') if has_growth else 'n/a (no leak.growth)'} | "
            f"{', '.join(f'{k} ×{v}' for k, v in sorted(finals.items()))} | {med} | "
            f"{max(r['stats']['changes'] for r in rs)} | {sum(r['stats']['contradicts'] for r in rs)}/{len(rs)}, "
            f"{sum(r['stats']['kind_differs'] for r in rs) if has_growth else '-'} |"
        )
    tp = sum(1 for r in done if r["final"]["verdict"] == "leak" and r["truth"]["verdict"] == "leak")
    fp = sum(1 for r in done if r["final"]["verdict"] == "leak" and r["truth"]["verdict"] != "leak")
    fn = sum(1 for r in done if r["final"]["verdict"] != "leak" and r["truth"]["verdict"] == "leak")
    prec = f"{tp / (tp + fp):.2f}" if tp + fp else "-"
    rec = f"{tp / (tp + fn):.2f}" if tp + fn else "-"
    right_v = sum(1 for r in done if r["final"]["verdict"] == r["truth"]["verdict"])
    right_k = sum(1 for r in done if right_kind(r["final"]["growth"], r["truth"]))
    n_changes = sum(1 for r in done if r["stats"]["changes"] > 1)
    stalls: dict[str, int] = {}
    for r in done:
        if r.get("stall_captures"):
            stalls[r["scenario"]] = stalls.get(r["scenario"], 0) + 1
    lines += [
        "",
        f"{len(done)} runs: final verdict right {right_v}/{len(done)}, growth kind right "
        f"{f'{right_k}/{len(done)}' if has_growth else 'n/a (this code names no kind)'}; `leak` precision {prec} ({tp} of {tp + fp} called), "
        f"recall {rec} ({tp} of {tp + fn} leaks); runs whose live verdict changed more than once after its first "
        f"answer: {n_changes}/{len(done)}.",
        "",
        "Runs with a stall capture in their record (taken live by the code that recorded them; no replay "
        "re-decides it): " + (", ".join(f"{k} {v}/{len(by[k])}" for k, v in sorted(stalls.items())) or "none") + ".",
    ]
    return "\n".join(lines)


TRUTH_UNITS = {
    "rate_mib_per_s": "MiB/s",
    "per_step_mib": "MiB per evaluation",
    "step_mib": "MiB once",
    "amplitude_mib": "MiB sawtooth",
}


def scenario_list() -> str:
    """The scenarios as a Markdown table: name, truth, length, what each does (its docstring's first sentence)."""
    lines = ["| scenario | truth: verdict / kind | s | what it runs |", "|---|---|---|---|"]
    for name, truth in scenarios().items():
        with open(os.path.join(SCENARIOS, name + ".py")) as f:
            doc = ast.get_docstring(ast.parse(f.read())) or ""
        first = " ".join(doc.split())
        kinds = " or ".join([truth["growth"], *truth.get("growth_also", ())])
        extra = ", ".join(f"{truth[k]:g} {unit}" for k, unit in TRUTH_UNITS.items() if k in truth)
        lines.append(
            f"| {name} | {truth['verdict']} / {kinds}{f' ({extra})' if extra else ''} | {truth['seconds']} | {first} |"
        )
    return "\n".join(lines)


def load_figures(done: list[dict[str, Any]]) -> str:
    """The corpus's load average at the runs' starts and ends, per load."""
    out = []
    for load in LOADS:
        sel = [r for r in done if r["load"] == load]
        if sel:
            vals = [r["loadavg_start"] for r in sel] + [r["loadavg_end"] for r in sel]
            out.append(
                f"{load}: 1-min load average {min(vals):.2f}-{max(vals):.2f} (median {statistics.median(vals):.2f}) "
                f"at the {len(sel)} runs' starts and ends"
            )
    return "; ".join(out) + "."


def corpus_summary(corpus: str, out: str) -> None:
    """A small copy of the manifest to commit (the records stay outside git): its format, and per run what was run
    and under which load, what it really did (the TRUTH line), without the paths."""
    keep = ("scenario", "load", "repeat", "wall_s", "loadavg_start", "loadavg_end", "started_at", "returncode")
    runs = [{k: r.get(k) for k in keep} | {"measured": r["truth"].get("measured", {})} for r in read_manifest(corpus)]
    truths = {n: t for n, t in scenarios().items() if any(r["scenario"] == n for r in runs)}
    with open(out, "w") as f:
        json.dump({"format": MANIFEST_FORMAT, "env": RUN_ENV, "truths": truths, "runs": runs}, f, indent=0)
        f.write("\n")


def code_judged_by() -> str:
    """Which code judged: where memscope was imported from, and that checkout's commit (dirty or not)."""
    import memscope

    root = os.path.dirname(os.path.dirname(os.path.abspath(memscope.__file__)))
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "memscope"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    return f"memscope from {root}" + (f" at {commit}{' (memscope/ modified)' if dirty else ''}" if commit else "")


# -- the smoke ---------------------------------------------------------------------------------------------------
def quick(out: str | None = None) -> int:
    """One short scenario recorded once (quiet), then replayed: everything runs, nothing timed is asserted."""
    with tempfile.TemporaryDirectory(prefix="verdict-bench-") as corpus:
        make_corpus(corpus, [QUICK_SCENARIO], ["quiet"], 1, 1, QUICK_SECONDS)
        done = replay(corpus, 5.0, 1)
        if not done or done[0]["returncode"] != 0:
            print("the smoke run did not record", file=sys.stderr)
            return 1
        md = f"{table(done)}\n\nlive line: {done[0]['stats']['sequence']}; replay {done[0]['replay_s']:.2f} s\n"
        print(md)
        if out:
            with open(out, "w") as f:
                f.write(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="record the corpus (the scenarios under memscope)")
    ap.add_argument("--replay", metavar="CORPUS", help="re-judge a corpus with this checkout's code")
    ap.add_argument("--quick", action="store_true", help="CI smoke: one short scenario recorded and replayed")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument(
        "--scenarios",
        metavar="DIR",
        help="the scenarios' folder (default benchmarks/scenarios; benchmarks/scenarios_heldout and "
        "scenarios_heldout2: written after the verdict was tuned, each docstring saying whether a change was made on it)",
    )
    ap.add_argument("--only", nargs="+", help="these scenarios only")
    ap.add_argument("--loads", nargs="+", choices=LOADS, default=list(LOADS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (--run)")
    ap.add_argument("--seconds", type=float, help="every scenario this long (default: each its own)")
    ap.add_argument("--every", type=float, default=5.0, help="live prefixes every S seconds (--replay)")
    ap.add_argument("--workers", type=int, default=2, help="replay processes")
    ap.add_argument(
        "--live",
        choices=("auto", "prefix"),
        default="auto",
        help="the live line: the checkout's own (auto), or the record's prefixes through the summary (prefix)",
    )
    ap.add_argument("--out", help="write the markdown table here")
    ap.add_argument("--json", help="write every run's replay here")
    ap.add_argument("--list", action="store_true", help="the scenarios and their truths, as Markdown")
    ap.add_argument("--corpus-summary", metavar="FILE", help="write a small summary of --corpus's manifest here")
    ns = ap.parse_args(argv)
    if ns.scenarios:
        global SCENARIOS
        SCENARIOS = os.path.abspath(ns.scenarios)
    if ns.quick:
        return quick(ns.out)
    if ns.list:
        print(scenario_list())
        return 0
    if ns.corpus_summary:
        corpus_summary(ns.corpus, ns.corpus_summary)
        return 0
    if ns.run:
        names = ns.only or list(scenarios())
        unknown = set(names) - set(scenarios())
        if unknown:
            print(f"no such scenario: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the spinners' finally runs
        make_corpus(ns.corpus, names, ns.loads, ns.repeats, ns.jobs, ns.seconds)
        return 0
    if ns.replay:
        t0, l0 = time.perf_counter(), _loadavg()
        done = replay(ns.replay, ns.every, ns.workers, ns.only, ns.live)
        if not done:
            print(f"{ns.replay}: no recorded runs (no manifest.json, or its records are gone)", file=sys.stderr)
            return 2
        cpu = sum(r["replay_cpu_s"] for r in done)
        md = (
            f"{table(done)}\n\nJudged by {code_judged_by()}. Load: {load_figures(done)} "
            f"Replay: {time.perf_counter() - t0:.1f} s wall with "
            f"{ns.workers} processes at a load average of {l0:.1f} -> {_loadavg():.1f}, {cpu:.1f} s of CPU in all "
            f"({cpu / len(done):.2f} s a run; live line every {ns.every:g} s, {ns.live}).\n"
        )
        print(md)
        if ns.out:
            with open(ns.out, "w") as f:
                f.write(md)
        if ns.json:
            with open(ns.json, "w") as f:
                json.dump([{k: v for k, v in r.items() if k != "live"} | {"live": r["live"]} for r in done], f)
        return 0
    ap.print_usage(sys.stderr)
    print("verdict_bench.py: say --run, --replay CORPUS or --quick", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
