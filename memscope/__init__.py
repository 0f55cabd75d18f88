"""memscope: a memory profiler for training runs.

import memscope
run = memscope.run(["train.py", "--epochs", "3"])   # starts in the background
run.wait(); print(run.summary()["exit"]["message"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from . import wiring as _wiring
from .errors import CensusError, ClusterError, LaunchError, ScaleneError, StacksError
from .markers import mark, phase  # tiny, stdlib only: safe to import in training code
from .version import __version__

if TYPE_CHECKING:
    from .session.options import Options
    from .session.run import Run

# The package's face: everything the README uses. Only this module, the CLI and the IPython extension import
# lazily (the engine, the views and the exporter load when first used, so that `import memscope` stays cheap).
__all__ = [
    "run",
    "attach",
    "last_run",
    "runs",
    "phase",
    "mark",
    "reopen",
    "open_snapshot",
    "cluster",
    "fit",
    "load_ipython_extension",
    "Run",
    "Options",
    "LaunchError",
    "CensusError",
    "StacksError",
    "ScaleneError",
    "ClusterError",
    "__version__",
]


def run(command: Sequence[str] | str, **options: Any) -> "Run":
    """Start ``command`` under memscope in the background and return its ``Run``.

    ``command`` is an argv list (``["train.py", "--epochs", "3"]`` or ``["bash", "train.sh"]``) or a string that
    is split like a shell would. Options: record_dir, interval_s, pss_interval_s, grace_s, output ("inherit" or
    "capture"), agent, limit_bytes, summary_json, cwd, env, scalene (True or "cpu", or "memory": the script runs
    under Scalene with profiling off, and ``run.scalene_snapshot(10)`` profiles the next 10 seconds),
    prometheus ("[HOST:]PORT": serve the run's state to Prometheus), hostname (its label), pushgateway (a URL:
    push the final state there at the end), prometheus_linger_s. In a notebook, keep_previous=True leaves going the
    run an earlier execution of the same cell started (a re-run stops it by default).
    """
    import shlex

    from .session.options import Options
    from .session.run import Run

    argv = shlex.split(command) if isinstance(command, str) else list(command)
    keep_previous = bool(options.pop("keep_previous", False))
    if "output" not in options and _in_notebook():
        from .magic import start_in_notebook

        # the same dashboard as %memscope; a re-run of the cell stops the run it started before (keep_previous)
        return start_in_notebook(argv, None, Options(**options), keep_previous=keep_previous)
    return Run(argv, options=Options(**options)).start()


def _in_notebook() -> bool:
    import sys

    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    from .magic import widgets_can_render

    return widgets_can_render(get_ipython())


def last_run() -> "Run | None":
    """The run that the last ``%memscope``, ``%%memscope`` or ``memscope.run()`` in this notebook started: how to
    reach a ``%%memscope`` cell's run (that cell shows its dashboard and returns nothing)."""
    from .magic import last_run as _last_run

    return _last_run()


def runs() -> "list[Run]":
    """The runs this kernel (this Python process) started that are still going, oldest first, each with
    ``.stop()``: what a re-run of a ``%memscope`` cell leaves going where the page sends no cell id (classic
    Notebook 6.5), or a ``memscope.run()`` whose handle was lost."""
    from .magic import runs as _runs

    return _runs()


def reopen(run_id: str, record_dir: str | None = None) -> Any:
    """Show the dashboard of a recorded run (an id, a unique prefix of it, 'last', or a path); a run still going
    in this kernel is followed live."""
    from .ui.dashboard import reopen as _reopen

    return _reopen(run_id, record_dir)


def open_snapshot(path: str) -> Any:
    """A CUDA memory snapshot pickle (``torch.cuda.memory._dump_snapshot``, or the one memscope saved at a CUDA
    OOM), read safely: displayed in a notebook, it shows the timeline, the segments, the largest allocations and
    the advice; ``.summary`` is what ``memscope snapshot FILE --json`` prints."""
    from .ui.snapshot_view import open_snapshot as _open

    return _open(path)


def cluster(
    prometheus_url: str,
    *,
    run: str | None = None,
    job: str | None = None,
    since: str | float = "6h",
    refresh_s: float = 5.0,
) -> Any:
    """The whole job in a notebook, read from Prometheus: a chart per hostname/rank (PSS stacked by role), each
    node's leak verdict and exit cause, refreshed every ``refresh_s`` seconds until every node has ended.

    ``run`` (a run id) or ``job`` (Prometheus' scrape job) selects what to show; raises ``memscope.ClusterError`` with a one-line message when Prometheus cannot be reached or holds no memscope data."""
    from .ui.cluster import cluster as _cluster

    return _cluster(prometheus_url, run=run, job=job, since=since, refresh_s=refresh_s)


def fit(
    command: Sequence[str] | str,
    sizes: Sequence[int] | str,
    *,
    target: int | None = None,
    limit: int | str | None = None,
    margin: float | str = 0.1,
    for_s: float | None = None,
    record_dir: str | None = None,
    wait: bool | None = None,
    **options: Any,
) -> Any:
    """Will ``target`` fit? Runs ``command`` (``{}`` where the size goes) as a short recorded probe at each of
    ``sizes``, fits peak = a + b x size per role and phase, and forecasts the peak at ``target`` (default: twice
    the largest size) against ``limit`` (bytes or "12G"; default the container's, else the host's) less ``margin``.
    The probes run with glibc's mmap threshold fixed (a line), plus one more at the largest size with the program's
    own allocator settings, whose retention is added to the forecast (docs/fit.md, "The allocator").

    Returns the ``Fit``: ``.result`` is what ``memscope fit --json`` prints. In a notebook it runs in the
    background and its chart (the probes, the line, the limit, the target) is drawn live (``wait=True`` blocks);
    elsewhere it runs to the end first. Bad input raises ``LaunchError`` (one line). Options: cwd, env,
    interval_s."""
    import shlex

    from .magic import start_fit

    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return start_fit(
        argv,
        sizes,
        target=target,
        limit=limit,
        margin=margin,
        for_s=for_s,
        record_dir=record_dir,
        wait=wait,
        **options,
    )


def load_ipython_extension(ip: Any) -> None:
    """``%load_ext memscope``: registers %memscope and %%memscope."""
    from .magic import load

    load(ip)


def attach(pid: int, **options: Any) -> "Run":
    """Watch a process tree that is already running (sampling only, no agent)."""
    from .session.options import Options
    from .session.run import Run

    return Run(attach=pid, options=Options(**options)).start()


def __getattr__(name: str) -> Any:
    # Lazy, so that `import memscope` stays cheap in a notebook kernel.
    if name == "Run":
        from .session.run import Run

        return Run
    if name == "Options":
        from .session.options import Options

        return Options
    raise AttributeError(name)


# -- wiring: what the lower layers call without importing the upper ones (see wiring.py) --------------------------
def _prometheus(run: "Run") -> Any:
    """A run that asks for Prometheus (or a Pushgateway) gets the exporter, attached from outside the run."""
    o = run.options
    if not (o.prometheus or o.pushgateway):
        return None
    from .export.prometheus import attach as attach_prometheus

    return attach_prometheus(run)


def _census_html(census: Any) -> str:
    from .ui.census import census_html

    return census_html(census.to_dict())


_wiring.RUN_ATTACHMENTS.append(_prometheus)
_wiring.HTML_RENDERERS["Census"] = _census_html


def _run_view(run: "Run") -> Any:
    """A Run displayed in a notebook: its live dashboard; None where widgets cannot render (its repr then)."""
    from IPython import get_ipython

    from .magic import widgets_can_render

    if not widgets_can_render(get_ipython()):
        return None
    from .ui.dashboard import view_bundle

    return view_bundle(run)


_wiring.MIMEBUNDLE_RENDERERS["Run"] = _run_view
