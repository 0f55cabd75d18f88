"""Prometheus recording and alerting rules for memscope's families, as plain data (one entry per rule).

A new alert is one ``Alert`` in ``ALERTS`` (with its runbook section in README.md, "Grafana and alerts") and its
firing and non-firing cases in tests/test_monitoring.py. Every alert keeps the labels that say which job,
instance, host, run and rank it is about, and carries a ``severity`` and a ``runbook_url``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model import (
    METRIC_EXIT_INFO,
    METRIC_GROWTH,
    METRIC_LEAK_SLOPE,
    METRIC_LIMIT,
    METRIC_MEMORY,
    METRIC_RUN_INFO,
)

# Where a runbook link points unless `memscope monitoring --runbook-base` says otherwise: the README's section
# "Grafana and alerts" as the package index renders it (a team with its own wiki passes its copy's address).
RUNBOOK_BASE = "https://pypi.org/project/memscope-ml/"

GROUP = "memscope"
# The labels that name one run on one host: every memscope family has run and hostname; Prometheus adds job and
# instance. Kept through every aggregation so that an alert says which run it is about.
RUN = "job, instance, run, hostname"

# Recorded series (level:metric:operations, Prometheus' naming convention).
PSS_SUM = "memscope:memory_pss_bytes:sum"
LEAK_SUM = "memscope:leak_slope_bytes_per_second:sum"
LIMIT_MAX = "memscope:limit_bytes:max"
TIME_TO_LIMIT = "memscope:time_to_limit_seconds"

# An exit seen up to this long ago still raises its alert (the exporter lingers a little, then its series go).
EXIT_SEEN = "15m"
# Causes that mean the run died (exit_cause.py's vocabulary); stopped_by_user, ok and detached are not alerts.
CRASH_CAUSES = ("exception", "cuda_oom", "segfault", "abort", "bus_error", "worker_crash", "killed", "exit_nonzero")

RECORDING: tuple[tuple[str, str], ...] = (
    # The run's memory on one host: PSS of all its processes, every rank and role (the limit is the host's or
    # the container's, shared by the ranks on it).
    (PSS_SUM, f'sum by ({RUN}) ({METRIC_MEMORY}{{kind="pss"}})'),
    # memscope's own leak slope, where its verdict is a leak: the floor's rise, spikes left out (a linear
    # projection of the raw series would call every validation spike a march to the limit).
    (LEAK_SUM, f'sum by ({RUN}) ({METRIC_LEAK_SLOPE}{{verdict="leak"}} > 0)'),
    (LIMIT_MAX, f"max by ({RUN}) ({METRIC_LIMIT})"),
    # Seconds until the run's memory reaches its limit at the leak's pace; only where memscope found a leak.
    (TIME_TO_LIMIT, f"clamp_min({LIMIT_MAX} - {PSS_SUM}, 0) / {LEAK_SUM}"),
)


@dataclass(frozen=True)
class Alert:
    """One alerting rule: its name, PromQL, how long it must hold, severity, and the words of its annotations
    (Prometheus templates: ``{{ $labels.run }}``, ``{{ $value }}``)."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    anchor: str  # the README section (GitHub's and PyPI's heading id) that says what to do


ALERTS: tuple[Alert, ...] = (
    Alert(
        "MemscopeMemoryLimitWithin30Minutes",
        f"{TIME_TO_LIMIT} < 1800",
        "1m",
        "warning",
        "Run {{ $labels.run }} on {{ $labels.hostname }} reaches its memory limit in about "
        "{{ $value | humanizeDuration }}",
        "memscope found a leak in run {{ $labels.run }} ({{ $labels.hostname }}); at its pace the run's memory "
        "reaches the limit in {{ $value | humanizeDuration }}. Save a checkpoint, then find what grows.",
        "alert-memory-limit-within-30-minutes",
    ),
    Alert(
        "MemscopeMemoryLimitWithin5Minutes",
        f"{TIME_TO_LIMIT} < 300",
        "30s",
        "critical",
        "Run {{ $labels.run }} on {{ $labels.hostname }} will be OOM-killed in about {{ $value | humanizeDuration }}",
        "Run {{ $labels.run }} ({{ $labels.hostname }}) reaches its memory limit in "
        "{{ $value | humanizeDuration }} at its leak's pace: checkpoint now or stop it.",
        "alert-memory-limit-within-5-minutes",
    ),
    Alert(
        "MemscopeLeak",
        f'{METRIC_GROWTH}{{kind="leak"}} == 1',
        "1m",  # memscope's live verdict already holds before it says leak (it changes only on new evidence)
        "warning",
        "Memory leak in run {{ $labels.run }} on {{ $labels.hostname }} (rank {{ $labels.rank }})",
        "memscope's verdict for run {{ $labels.run }} is a leak: some process's own memory keeps growing. "
        "Open its dashboard or `memscope report` for the process, the pace and what to check.",
        "alert-leak",
    ),
    Alert(
        "MemscopeDataLoaderCopyOnRead",
        f'{METRIC_GROWTH}{{kind="copy_on_read"}} == 1',
        "30s",  # bounded and only info; memscope's live verdict held it before saying it
        "info",
        "DataLoader copy-on-read in run {{ $labels.run }} on {{ $labels.hostname }} (rank {{ $labels.rank }})",
        "The DataLoader workers of run {{ $labels.run }} are copying their parent's pages (Python objects read "
        "in workers): memory grows to about workers x the dataset, then holds. Store the dataset in numpy, Arrow "
        "or one bytes buffer, or use fewer workers.",
        "alert-dataloader-copy-on-read",
    ),
    Alert(
        "MemscopeOOMKilled",
        f'last_over_time({METRIC_EXIT_INFO}{{cause="oom_kill"}}[{EXIT_SEEN}])',
        "0s",
        "critical",
        "Run {{ $labels.run }} on {{ $labels.hostname }} was killed for lack of memory",
        "The kernel's OOM killer ended run {{ $labels.run }} ({{ $labels.hostname }}). `memscope report` has its "
        "peak, the process that was killed and its last stacks.",
        "alert-oom-killed",
    ),
    Alert(
        "MemscopeRunCrashed",
        f'last_over_time({METRIC_EXIT_INFO}{{cause=~"{"|".join(CRASH_CAUSES)}"}}[{EXIT_SEEN}])',
        "0s",
        "warning",
        "Run {{ $labels.run }} on {{ $labels.hostname }} ended: {{ $labels.cause }}",
        "Run {{ $labels.run }} ({{ $labels.hostname }}) ended with cause {{ $labels.cause }} "
        "{{ $labels.signal }}. `memscope report` says why and what to do next.",
        "alert-run-crashed",
    ),
    Alert(
        "MemscopeExporterDown",
        # The target is down, and the last thing it said was a run that had not ended (an exporter that lingered
        # after its run's end and then went away is no alert).
        f"up == 0 and on (job, instance) (last_over_time({METRIC_RUN_INFO}[{EXIT_SEEN}]) unless on (job, instance) "
        f"last_over_time({METRIC_EXIT_INFO}[{EXIT_SEEN}]))",
        "1m",
        "warning",
        "memscope's exporter at {{ $labels.instance }} is gone while its run was going",
        "Prometheus cannot scrape {{ $labels.instance }} and the run it watched had not ended: the node, memscope "
        "or the training may be gone. Check the node; `memscope ls` there says how the run ended.",
        "alert-exporter-down",
    ),
)


def runbook_url(anchor: str, base: str = RUNBOOK_BASE) -> str:
    """The runbook link of one alert."""
    return f"{base}#{anchor}"


def rule_groups(base: str = RUNBOOK_BASE, interval: str | None = None) -> dict[str, Any]:
    """The rules file's content (``groups:``), as Prometheus reads it."""
    rules: list[dict[str, Any]] = [{"record": name, "expr": expr} for name, expr in RECORDING]
    for a in ALERTS:
        rule: dict[str, Any] = {"alert": a.name, "expr": a.expr}
        if a.for_ != "0s":
            rule["for"] = a.for_
        rule["labels"] = {"severity": a.severity}
        rule["annotations"] = {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": runbook_url(a.anchor, base),
        }
        rules.append(rule)
    group: dict[str, Any] = {"name": GROUP}
    if interval:
        group["interval"] = interval
    group["rules"] = rules
    return {"groups": [group]}
