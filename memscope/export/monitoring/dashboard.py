"""The Grafana dashboard for memscope's families, as plain data: template variables, then one entry per panel.

A new panel is one call in ``panels()``; its queries must return data from a real Prometheus scraping real runs
(tests/test_monitoring.py), or the panel sits in the GPU row, which that test knows needs a GPU.
"""

from __future__ import annotations

from typing import Any

from ...model import (
    METRIC_EXIT_INFO,
    METRIC_GPU_MEMORY,
    METRIC_GROWTH,
    METRIC_HOST_AVAILABLE,
    METRIC_LEAK_SLOPE,
    METRIC_LIMIT,
    METRIC_MEMORY,
    METRIC_PROCESSES,
    METRIC_RUN_INFO,
)
from .rules import TIME_TO_LIMIT

UID = "memscope-training-memory"
TITLE = "memscope: training memory"
GPU_ROW = "GPU (where a GPU is used)"
DS = {"type": "prometheus", "uid": "${datasource}"}
# The selectors every query carries: the run(s) chosen above, and the rank(s) where a family has ranks.
RUN_SEL = 'job=~"$job", hostname=~"$hostname", run=~"$run"'
RANK_SEL = RUN_SEL + ', rank=~"$rank"'


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": f"var-{name}"},
        "refresh": 2,  # on a change of the time range: runs come and go
        "multi": True,
        "includeAll": True,
        "allValue": ".*",  # matches the empty rank of a launcher too
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def templating() -> list[dict[str, Any]]:
    """The data source, then job, host, run and rank: each narrowed by the ones before it."""
    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "current": {"text": "", "value": ""},  # empty: Grafana takes the default Prometheus source
            "hide": 0,
        },
        _variable("job", "job", f"label_values({METRIC_RUN_INFO}, job)"),
        _variable("hostname", "host", f'label_values({METRIC_RUN_INFO}{{job=~"$job"}}, hostname)'),
        _variable("run", "run", f'label_values({METRIC_RUN_INFO}{{job=~"$job", hostname=~"$hostname"}}, run)'),
        _variable("rank", "rank", f'label_values({METRIC_MEMORY}{{job=~"$job", run=~"$run"}}, rank)'),
    ]


def _target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def _panel(
    pid: int,
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    grid: tuple[int, int, int, int],
    unit: str = "bytes",
    **extra: Any,
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
        **extra,
    }


def _dashed(name: str) -> dict[str, Any]:
    """A line drawn over a stacked chart without joining the stack (the limit, the host's available memory)."""
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [
            {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}},
            {"id": "custom.fillOpacity", "value": 0},
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        ],
    }


def _stat(
    pid: int, title: str, description: str, expr: str, legend: str, x: int, unit: str, empty: str
) -> dict[str, Any]:
    return _panel(
        pid,
        "stat",
        title,
        description,
        [_target(expr, legend, instant=True)],
        (x, 0, 6, 4),
        unit,
        options={"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name", "colorMode": "value"},
        overrides=[],
        **{"fieldConfig_noValue": empty},
    )


def panels() -> list[dict[str, Any]]:
    """The panels, top to bottom; the GPU row last, collapsed, so that a CPU-only job shows no empty GPU chart."""
    stacked = {"custom": {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}}
    out = [
        _stat(
            1,
            "Time to the limit",
            "At the pace of the leak memscope found, the time until the run's memory "
            "reaches its limit (the container's, --limit's, or the host's). Empty: no leak found.",
            f"min by (run, hostname) ({TIME_TO_LIMIT}{{{RUN_SEL}}})",
            "{{hostname}} {{run}}",
            0,
            "s",
            "no leak found",
        ),
        _stat(
            2,
            "Leak slope",
            "How fast the leaking processes' own memory grows (memscope's verdict: the floor, spikes left out).",
            f'sum by (run, hostname) ({METRIC_LEAK_SLOPE}{{{RANK_SEL}, verdict="leak"}})',
            "{{hostname}} {{run}}",
            6,
            "Bps",
            "no leak",
        ),
        _stat(
            3,
            "What the memory is doing",
            "memscope's growth kind: flat, spikes, step, leak, copy_on_read "
            "(DataLoader workers un-sharing their parent's pages: bounded), more_processes.",
            f"max by (run, hostname, rank, kind) ({METRIC_GROWTH}{{{RANK_SEL}}}) == 1",
            "{{hostname}} rank {{rank}}: {{kind}}",
            12,
            "none",
            "not yet known",
        ),
        _stat(
            4,
            "Processes alive",
            "The run's processes alive now: main, wrappers, DataLoader and compile workers, ranks.",
            f"sum by (run, hostname) ({METRIC_PROCESSES}{{{RANK_SEL}}})",
            "{{hostname}} {{run}}",
            18,
            "none",
            "none",
        ),
        _panel(
            5,
            "timeseries",
            "Memory by role (PSS), against the limit",
            "The run's memory (PSS: shared pages split among their processes, so the stack adds up) by role, "
            "stacked; the limit and the host's available memory as dashed lines.",
            [
                _target(f'sum by (run, role) ({METRIC_MEMORY}{{{RANK_SEL}, kind="pss"}})', "{{run}} {{role}}"),
                _target(f"max({METRIC_LIMIT}{{{RUN_SEL}}})", "limit", "B"),
                _target(f"min({METRIC_HOST_AVAILABLE}{{{RUN_SEL}}})", "host available", "C"),
            ],
            (0, 4, 16, 9),
            options={"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]}},
            overrides=[_dashed("limit"), _dashed("host available")],
            fieldConfig_defaults_extra=stacked,
        ),
        _panel(
            6,
            "timeseries",
            "Leak slope by role",
            "memscope's slope of each role's own memory floor, with its verdict.",
            [_target(f"{METRIC_LEAK_SLOPE}{{{RANK_SEL}}}", "{{rank}} {{role}} ({{verdict}})")],
            (16, 4, 8, 9),
            "Bps",
        ),
        _panel(
            7,
            "timeseries",
            "Ranks side by side (PSS)",
            "Each rank's memory (its processes and their DataLoader workers), one line per host and rank.",
            [
                _target(
                    f'sum by (hostname, rank) ({METRIC_MEMORY}{{{RUN_SEL}, kind="pss"}})', "{{hostname}} rank {{rank}}"
                )
            ],
            (0, 13, 12, 8),
        ),
        _panel(
            8,
            "timeseries",
            "Private memory by role (what a leak grows)",
            "Anonymous PSS + swap by role: the memory a leak grows; copy-on-read shows here as workers' private "
            "memory rising while their RSS stays flat.",
            [_target(f'sum by (run, role) ({METRIC_MEMORY}{{{RANK_SEL}, kind="private"}})', "{{run}} {{role}}")],
            (12, 13, 12, 8),
        ),
        _panel(
            9,
            "timeseries",
            "Processes alive by role",
            "How many processes of each role are alive (DataLoader workers restarted each epoch show as steps).",
            [_target(f"sum by (run, role) ({METRIC_PROCESSES}{{{RANK_SEL}}})", "{{run}} {{role}}")],
            (0, 21, 12, 7),
            "none",
        ),
        _panel(
            10,
            "table",
            "Exits and OOM kills",
            "Runs that ended in the time range, with memscope's cause (oom_kill, segfault, exception, cuda_oom, "
            "worker_crash, ...); `memscope report` on the node says what to do next.",
            [
                _target(
                    f"max by (run, hostname, cause, signal) (last_over_time({METRIC_EXIT_INFO}{{{RUN_SEL}}}[$__range]))",
                    "",
                    instant=True,
                    format="table",
                )
            ],
            (12, 21, 12, 7),
            "none",
            transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}],
        ),
        {
            "id": 11,
            "type": "row",
            "title": GPU_ROW,
            "collapsed": True,
            "gridPos": {"x": 0, "y": 28, "w": 24, "h": 1},
            "panels": [
                _panel(
                    12,
                    "timeseries",
                    "GPU memory by rank",
                    "GPU only. NVML's used memory per device, and PyTorch's allocator: allocated and reserved.",
                    [
                        _target(
                            f"sum by (hostname, rank, gpu, kind) ({METRIC_GPU_MEMORY}{{{RANK_SEL}}})",
                            "{{hostname}} rank {{rank}} gpu {{gpu}} {{kind}}",
                        )
                    ],
                    (0, 29, 24, 8),
                )
            ],
        },
    ]
    return [_finish(p) for p in out]


def _finish(p: dict[str, Any]) -> dict[str, Any]:
    """Fold the helpers' flat extras into Grafana's nesting (fieldConfig.defaults)."""
    fc = p.get("fieldConfig")
    if fc is not None:
        if "fieldConfig_noValue" in p:
            fc["defaults"]["noValue"] = p.pop("fieldConfig_noValue")
        fc["defaults"].update(p.pop("fieldConfig_defaults_extra", {}))
    if p.get("type") == "row":
        p["panels"] = [_finish(q) for q in p["panels"]]
    return p


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model (Grafana's classic schema, importable as it is or provisioned from a file)."""
    return {
        "uid": UID,
        "title": TITLE,
        "description": "Memory of training runs watched by memscope: by role, against the limit, with its verdict.",
        "tags": ["memscope", "memory", "training"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": templating()},
        "panels": panels(),
    }
