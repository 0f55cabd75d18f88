"""The start of a run: its attachments, the command in a session of its own (the agents' environment, the
subreaper first), the record's first row, the proof of membership, and the threads that watch it."""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

from .. import supervise
from ..agent import protocol
from ..collect import gpu as gpu_mod
from ..collect import host as host_mod
from ..collect import procfs
from ..collect.tree import TreeSampler
from ..errors import LaunchError
from . import finish as finish_mod

# The Run, typed Any as in finish.py: run.py imports this module, and a type-only import back would be a circle.
Run = Any


def launch(run: Run) -> None:
    """Launch ``run``'s command (or start watching the attached tree); returns at once with the run going."""
    o = run.options
    env = dict(os.environ if o.env is None else o.env)
    for a in run._attaching:  # first: a port already taken must stop us before anything runs
        try:
            a.start()
        except LaunchError:
            finish_mod.abort(run)
            raise
    run._kmsg = host_mod.KernelLog()  # before the run: its OOM kill may come at once
    # The membership marker is a secret, never the run id: the id names the record, which others can list, and a
    # process of another user started with it was adopted into the run and signalled with it.
    key = secrets.token_hex(16)
    if not run.attached:
        env[protocol.ENV_RUN] = run.run_id
        env[protocol.ENV_KEY] = key
        if o.agent:
            run.agents.environment(env)
        if o.output == "capture":
            env.setdefault("PYTHONUNBUFFERED", "1")
        # The subreaper first (the CLI's only: see hold_subreaper): an orphan made in the run's first
        # milliseconds must come to memscope too.
        run._subreaper = supervise.hold_subreaper()
        try:
            run._proc = supervise.launch(run.command, o.cwd, env, run.output_files)
        except OSError as exc:
            finish_mod.abort(run)
            raise LaunchError(f"{run.command[0]}: {exc.strerror or exc}") from None
        run.pid = run._proc.pid
        run._launcher_peak = supervise.own_peak_rss()  # the root's ru_maxrss counts from here (supervise)
    run.t0 = time.monotonic()
    run.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    run._recorder.begin(
        run.run_id,
        list(run.command),
        os.path.abspath(o.cwd or os.getcwd()),
        run.started_at,
        time.time(),
        run.pid,
        {
            "attached": run.attached,
            "script": run.script,
            "agent": o.agent,
            "limit_bytes": o.limit_bytes,
            "interval_s": o.interval_s,
            "pss_interval_s": o.pss_interval_s,
            "scalene": run.scalene.mode if run.scalene else None,
            # Where `memscope stacks` from another terminal leaves its request (0700: this user only).
            "agent_dir": run.agents.dir if o.agent and not run.attached else None,
            "stacks_at": o.stacks_at,
            "stall_after_s": o.stall_after_s,
        },
    )
    marker = None if run.attached else f"{protocol.ENV_KEY}={key}".encode()
    root_stat = _stat(run.pid)
    # A process we launched owns its session; one we attached to may share its shell's: no session proof then.
    membership = supervise.Membership(
        run.pid,
        session=None if run.attached else run.pid,
        marker=marker,
        started_ticks=root_stat.starttime if root_stat else None,
        reparented=run._subreaper and not run.attached,
    )
    run.tree = TreeSampler(
        run.pid,
        run.publish,
        run.elapsed,
        marker=marker,
        script=run.script,
        membership=membership,
        reap=supervise.reap,
    )
    run._sup = supervise.Supervisor(
        run.pid,
        run.attached,
        run.tree.members,
        lambda: run.returncode is not None or run._proc is None,
        on_sent=run._signal_sent,
    )
    run.status = "running"
    run._spawn(run.sampler.rss_loop, "memscope-rss")
    run._spawn(run.sampler.pss_loop, "memscope-pss")
    run._spawn(lambda: finish_mod.wait_loop(run), "memscope-waiter")
    run._spawn(lambda: _gpu_loop(run), "memscope-gpu")
    run._spawn(finish_mod.load_analyses, "memscope-analyses")  # while the command starts: its end needs them
    if run._proc is not None and run.output_files:
        for name, path in zip(("stdout", "stderr"), run.output_files):
            run._spawn(lambda name=name, path=path: finish_mod.read_output(run, path, name), f"memscope-{name}")


def _gpu_loop(run: Run) -> None:
    # NVML is opened on this thread, not before the run goes: loading pynvml and the driver's library costs
    # 15-25 ms that the start would wait on. Without a driver it returns at once and nothing is recorded.
    nvml = gpu_mod.Nvml.open()
    if nvml is not None:
        gpu_mod.sample_loop(
            nvml, run.publish, run.elapsed, run.tree.alive_pids, run.sampler.done, run.options.host_interval_s
        )


def _stat(pid: int) -> Any:
    try:
        return procfs.read_stat(pid) if pid > 0 else None
    except OSError:
        return None
