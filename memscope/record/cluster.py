"""The whole job, read back from Prometheus: every node's memscope endpoint, one panel per hostname and rank.

``load_job(url, run=…, job=…)`` asks Prometheus' HTTP API (``query_range``, standard library only) for what the
exporters of ``memscope/export/prometheus.py`` served, and shapes it into ``Panel``s: each (hostname, rank)'s PSS
by role, its host's available memory and limit, the latest leak verdict of each role, and the node's exit cause.
Views (``memscope/ui/cluster.py``) draw them; nothing here imports a UI. Every failure is a ``ClusterError`` whose
message is one line: a bad URL, Prometheus down or not Prometheus, a refused query, no memscope data.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterError
from ..model import (
    METRIC_EXIT_INFO,
    METRIC_HOST_AVAILABLE,
    METRIC_LEAK_SLOPE,
    METRIC_LIMIT,
    METRIC_MEMORY,
    METRIC_RUN_INFO,
)

__all__ = ["ClusterError", "Panel", "Job", "load_job", "check_url", "selector", "parse_duration"]

TIMEOUT_S = 10.0
FINE_POINTS = 1000  # points per series in the chart's window (Prometheus answers at most 11,000)
COARSE_POINTS = 250  # the first pass that finds when the job ran


@dataclass
class Panel:
    """One (hostname, rank): ``rank`` is "" for the processes without a RANK (the launcher, wrappers)."""

    hostname: str
    rank: str
    roles: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # role -> {"t", "y"} PSS
    host_available: dict[str, list[float]] = field(default_factory=lambda: {"t": [], "y": []})
    limit: dict[str, list[float]] = field(default_factory=lambda: {"t": [], "y": []})
    limit_source: str | None = None
    leak: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> {"verdict", "slope"}
    exit: dict[str, str] | None = None  # the node's: {"cause", "signal"}
    run: str = ""
    command: str = ""

    @property
    def title(self) -> str:
        """The panel's title: hostname and rank."""
        return f"{self.hostname} rank {self.rank}" if self.rank else f"{self.hostname} (no RANK: launcher)"

    def now_bytes(self) -> int:
        """PSS of the panel's processes at its last point."""
        return int(sum(s["y"][-1] for s in self.roles.values() if s["y"]))

    def peak_bytes(self) -> int:
        """The highest PSS of the panel's processes, all roles together."""
        cols = [s["y"] for s in self.roles.values()]
        return int(max((sum(v) for v in zip(*cols)), default=0))

    def chart_data(self, version: int = 0) -> dict[str, Any]:
        """What ``MemoryChart`` and ``report.memory_figure`` draw (a ``RunSeries.snapshot()``'s shape)."""
        ends = [s["t"][-1] for s in self.roles.values() if s["t"]]
        return {
            "tree_pss_by_role": self.roles,
            "host_available": self.host_available,
            "limit": self.limit,
            "t_last": max(ends, default=0.0),
            "ended": self.exit is not None,
            "version": version,
        }


@dataclass
class Job:
    """A multi-node job as Prometheus holds it: a panel per hostname/rank."""

    url: str
    selector: str
    t0: float  # unix time of the chart's 0 (the job's first scrape in the window)
    end: float
    step_s: float
    panels: list[Panel]

    @property
    def hostnames(self) -> list[str]:
        """The job's hostnames, in order."""
        return sorted({p.hostname for p in self.panels})


def check_url(url: str) -> str:
    """Prometheus' base URL (``http://host:9090``, optionally with a path prefix); ClusterError if it is not one."""
    u = (url or "").strip()
    if "://" not in u:
        u = "http://" + u
    try:
        p = urllib.parse.urlsplit(u)
        p.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise ClusterError(f"not a Prometheus URL: {url!r} (e.g. http://prometheus:9090)") from None
    # Whitespace or control characters: http.client refuses them deep in the request (a traceback, not a line).
    bad_chars = any(c.isspace() or not c.isprintable() for c in p.netloc)
    if p.scheme not in ("http", "https") or not p.hostname or p.query or p.fragment or bad_chars:
        raise ClusterError(f"not a Prometheus URL: {url!r} (e.g. http://prometheus:9090)")
    path = p.path.rstrip("/")
    for tail in ("/graph", "/api/v1"):  # a URL copied from the browser or the API docs
        if path.endswith(tail):
            path = path[: -len(tail)]
    return urllib.parse.urlunsplit((p.scheme, p.netloc, path, "", ""))


def _promql_str(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(run: str | None = None, job: str | None = None, extra: dict[str, str] | None = None) -> str:
    """Label matchers for the query: ``{run="…", job="…"}`` (values escaped as PromQL strings)."""
    m = {k: v for k, v in (("run", run), ("job", job)) if v}
    m.update(extra or {})
    return "{" + ",".join(f"{k}={_promql_str(str(v))}" for k, v in m.items()) + "}"


def parse_duration(text: str | float) -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``2d`` -> seconds; ValueError otherwise."""
    if isinstance(text, (int, float)):
        v = float(text)
    else:
        s = text.strip().lower()
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(s[-1:], None)
        try:
            v = float(s[:-1] if mult else s) * (mult or 1)
        except ValueError:
            v = math.nan
    if not v > 0 or math.isinf(v):
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 15m, 6h)")
    return v


def _get(base: str, path: str, params: dict[str, Any], timeout: float) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError, OSError):
            detail = exc.reason
        if exc.code == 404:
            raise ClusterError(f"{base} has no Prometheus API (HTTP 404 on {path})") from None
        raise ClusterError(
            f"Prometheus at {base} refused the query (HTTP {exc.code}): {str(detail).splitlines()[0] if detail else ''}"
        ) from None
    except urllib.error.URLError as exc:
        raise ClusterError(f"cannot reach Prometheus at {base}: {_one_line(exc.reason)}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # timeouts, resets, a malformed URL or answer
        raise ClusterError(f"cannot reach Prometheus at {base}: {_one_line(exc)}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise ClusterError(f"{base} did not answer like Prometheus (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
        raise ClusterError(
            f"{base} did not answer like Prometheus: {_one_line(doc.get('error') if isinstance(doc, dict) else doc)}"
        )
    return doc["data"]


def _one_line(x: Any) -> str:
    text = str(x) or type(x).__name__
    return text.splitlines()[0] if text.strip() else type(x).__name__


def query_range(
    base: str, promql: str, start: float, end: float, step: float, timeout: float = TIMEOUT_S
) -> list[dict[str, Any]]:
    """A PromQL range query's series (ClusterError, one line, when Prometheus cannot answer)."""
    data = _get(
        base,
        "/api/v1/query_range",
        {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        timeout,
    )
    result = data.get("result")
    return result if isinstance(result, list) else []


def _window(seconds: float) -> str:
    return f"{max(1, int(math.ceil(seconds)))}s"


def _points(series: dict[str, Any]) -> tuple[list[float], list[float]]:
    t, y = [], []
    for ts, v in series.get("values") or []:
        try:
            t.append(float(ts))
            y.append(float(v))
        except (TypeError, ValueError):
            continue
    return t, y


def load_job(
    url: str,
    *,
    run: str | None = None,
    job: str | None = None,
    since: str | float = "6h",
    now: float | None = None,
    timeout: float = TIMEOUT_S,
) -> Job:
    """Read the job from Prometheus: the last ``since`` (default 6 h), narrowed to when memscope reported."""
    base = check_url(url)
    try:
        since_s = parse_duration(since)
    except ValueError as exc:
        raise ClusterError(str(exc)) from None
    sel = selector(run, job)
    now = time.time() if now is None else now
    start, end = _when(base, sel, since_s, now, timeout, run, job)
    step = max(1.0, (end - start) / FINE_POINTS)

    def q(promql: str) -> list[dict[str, Any]]:
        return query_range(base, promql, start, end, step, timeout)

    w = _window(step)
    mem = q(f"sum by (hostname, rank, role) ({METRIC_MEMORY}{selector(run, job, {'kind': 'pss'})})")
    avail = q(f"max by (hostname) ({METRIC_HOST_AVAILABLE}{sel})")
    limit = q(f"max by (hostname, source) ({METRIC_LIMIT}{sel})")
    leak = q(f"last_over_time({METRIC_LEAK_SLOPE}{sel}[{w}])")
    exits = q(f"max by (hostname, run, cause, signal) (last_over_time({METRIC_EXIT_INFO}{sel}[{w}]))")
    info = q(f"max by (hostname, run, command) (last_over_time({METRIC_RUN_INFO}{sel}[{w}]))")

    t0 = min((t for s in mem + info for t in _points(s)[0]), default=start)
    panels: dict[tuple[str, str], Panel] = {}
    _memory(panels, mem, t0)
    _leaks(panels, leak)
    _hosts_into(panels, _per_host(avail, limit, exits, info, t0))
    ordered = sorted(panels.values(), key=lambda p: (p.hostname, _rank_key(p.rank)))
    return Job(base, sel, t0, end, step, ordered)


def _when(
    base: str, sel: str, since_s: float, now: float, timeout: float, run: str | None, job: str | None
) -> tuple[float, float]:
    """When the job ran, within the last ``since_s``; ClusterError when memscope reported nothing then."""
    # Pass 1, coarse: when did the job run? (max_over_time covers each whole step: a short run is not missed.)
    coarse = max(1.0, since_s / COARSE_POINTS)
    found = query_range(
        base, f"max(max_over_time({METRIC_RUN_INFO}{sel}[{_window(coarse)}]))", now - since_s, now, coarse, timeout
    )
    times = [t for s in found for t in _points(s)[0]]
    if not times:
        what = " and ".join(f"{k}={v!r}" for k, v in (("run", run), ("job", job)) if v) or "any run"
        raise ClusterError(
            f"no memscope data for {what} in Prometheus at {base} over the last "
            f"{_human(since_s)} (is each node's `memscope run --prometheus` scraped?)"
        )
    return min(times) - coarse, min(now, max(times) + coarse)


def _panel(panels: dict[tuple[str, str], Panel], m: dict[str, str]) -> Panel:
    """The panel of a series' hostname and rank (made on first sight)."""
    key = (m.get("hostname", ""), m.get("rank", ""))
    if key not in panels:
        panels[key] = Panel(*key)
    return panels[key]


def _memory(panels: dict[tuple[str, str], Panel], mem: list[dict[str, Any]], t0: float) -> None:
    """Each panel's PSS by role, on one time axis."""
    raw: dict[tuple[str, str], dict[str, dict[float, float]]] = {}
    for s in mem:
        m = s.get("metric") or {}
        p = _panel(panels, m)
        t, y = _points(s)
        raw.setdefault((p.hostname, p.rank), {})[m.get("role", "other")] = dict(zip(t, y))
    for key, by_role in raw.items():
        # One time axis per panel (the chart stacks roles on it): a role absent at a point holds nothing there.
        grid = sorted({t for pts in by_role.values() for t in pts})
        panels[key].roles = {
            role: {"t": [t - t0 for t in grid], "y": [pts.get(t, 0.0) for t in grid]}
            for role, pts in sorted(by_role.items())
        }


def _per_host(
    avail: list[dict[str, Any]],
    limit: list[dict[str, Any]],
    exits: list[dict[str, Any]],
    info: list[dict[str, Any]],
    t0: float,
) -> dict[str, dict[str, Any]]:
    """What each hostname reported: available memory, its limit (and its source), its exit, its run and command."""
    per_host: dict[str, dict[str, Any]] = {}
    for s in avail:
        t, y = _points(s)
        per_host.setdefault((s.get("metric") or {}).get("hostname", ""), {})["available"] = {
            "t": [x - t0 for x in t],
            "y": y,
        }
    for s in limit:
        m = s.get("metric") or {}
        t, y = _points(s)
        h = per_host.setdefault(m.get("hostname", ""), {})
        if len(t) >= len(h.get("limit", {}).get("t", [])):  # a source that changed: the longer series
            h["limit"], h["source"] = {"t": [x - t0 for x in t], "y": y}, m.get("source")
    for s in exits:
        m = s.get("metric") or {}
        per_host.setdefault(m.get("hostname", ""), {})["exit"] = {
            "cause": m.get("cause", "unknown"),
            "signal": m.get("signal", ""),
        }
    for s in info:
        m = s.get("metric") or {}
        t, _ = _points(s)
        h = per_host.setdefault(m.get("hostname", ""), {})
        if t and t[-1] >= h.get("info_t", -math.inf):
            h.update(info_t=t[-1], run=m.get("run", ""), command=m.get("command", ""))
    return per_host


def _leaks(panels: dict[tuple[str, str], Panel], leak: list[dict[str, Any]]) -> None:
    """Each panel's current leak verdict and slope by role."""
    newest: dict[tuple[str, str, str], float] = {}
    for s in leak:
        m = s.get("metric") or {}
        t, y = _points(s)
        if not t:
            continue
        p = _panel(panels, m)
        role, k = m.get("role", "other"), (p.hostname, p.rank, m.get("role", "other"))
        # The verdict is a label: when it changed, the series last seen is the current one.
        if t[-1] >= newest.get(k, -math.inf):
            newest[k] = t[-1]
            p.leak[role] = {
                "verdict": m.get("verdict", "insufficient_data"),
                "slope": None if math.isnan(y[-1]) else y[-1],
            }


def _hosts_into(panels: dict[tuple[str, str], Panel], per_host: dict[str, dict[str, Any]]) -> None:
    """Each panel gets its hostname's figures; a node whose memory never reached a scrape still shows its exit."""
    for p in panels.values():
        h = per_host.get(p.hostname, {})
        p.host_available = h.get("available", p.host_available)
        p.limit, p.limit_source = h.get("limit", p.limit), h.get("source")
        p.exit, p.run, p.command = h.get("exit"), h.get("run", ""), h.get("command", "")
    for host, h in per_host.items():
        if "info_t" in h and not any(p.hostname == host for p in panels.values()):
            p = _panel(panels, {"hostname": host, "rank": ""})
            p.exit, p.run, p.command = h.get("exit"), h.get("run", ""), h.get("command", "")


def _rank_key(rank: str) -> tuple[int, int, str]:
    return (0, int(rank), "") if rank.isdigit() else (1 if rank else -1, 0, rank)


def _human(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= n and seconds % n == 0:
            return f"{int(seconds // n)}{unit}"
    return f"{seconds:g}s"
