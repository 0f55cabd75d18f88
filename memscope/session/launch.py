"""The start of a run: its attachments, the command in a session of its own (the agents' environment, the
subreaper first), the record's first row, the proof of membership, and the threads that watch it."""

from __future__ import annotations

import functools
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
from .parts import RunParts


def launch(run: RunParts) -> None:
    """Launch ``run``'s command (or start watching the attached tree); returns at once with the run going."""
    st = run.state
    o = st.options
    env = dict(os.environ if o.env is None else o.env)
    for a in run.attaching:  # first: a port already taken must stop us before anything runs
        try:
            a.start()
        except LaunchError:
            finish_mod.abort(run)
            raise
    st.kmsg = host_mod.KernelLog()  # before the run: its OOM kill may come at once
    # The membership marker is a secret, never the run id: the id names the record, which others can list, and a
    # process of another user started with it was adopted into the run and signalled with it.
    key = secrets.token_hex(16)
    if not st.attached:
        env[protocol.ENV_RUN] = st.run_id
        env[protocol.ENV_KEY] = key
        if o.agent:
            run.agents.environment(env)
        if o.output == "capture":
            env.setdefault("PYTHONUNBUFFERED", "1")
        # The subreaper first (the CLI's only: see hold_subreaper): an orphan made in the run's first
        # milliseconds must come to memscope too.
        st.subreaper = supervise.hold_subreaper()
        try:
            st.proc = supervise.launch(st.command, o.cwd, env, st.output_files)
        except OSError as exc:
            finish_mod.abort(run)
            raise LaunchError(f"{st.command[0]}: {exc.strerror or exc}") from None
        st.pid = st.proc.pid
        st.launcher_peak = supervise.own_peak_rss()  # the root's ru_maxrss counts from here (supervise)
    st.t0 = time.monotonic()
    st.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    st.recorder.begin(
        st.run_id,
        list(st.command),
        os.path.abspath(o.cwd or os.getcwd()),
        st.started_at,
        time.time(),
        st.pid,
        {
            "attached": st.attached,
            "script": st.script,
            "agent": o.agent,
            "limit_bytes": o.limit_bytes,
            "interval_s": o.interval_s,
            "pss_interval_s": o.pss_interval_s,
            "scalene": run.scalene.mode if run.scalene else None,
            # Where `memscope stacks` from another terminal leaves its request (0700: this user only).
            "agent_dir": run.agents.dir if o.agent and not st.attached else None,
            "stacks_at": o.stacks_at,
            "stall_after_s": o.stall_after_s,
        },
    )
    marker = None if st.attached else f"{protocol.ENV_KEY}={key}".encode()
    root_stat = _stat(st.pid)
    # A process we launched owns its session; one we attached to may share its shell's: no session proof then.
    membership = supervise.Membership(
        st.pid,
        session=None if st.attached else st.pid,
        marker=marker,
        started_ticks=root_stat.starttime if root_stat else None,
        reparented=st.subreaper and not st.attached,
    )
    st.tree = TreeSampler(
        st.pid,
        st.publish,
        st.elapsed,
        marker=marker,
        script=st.script,
        membership=membership,
        reap=supervise.reap,
    )
    st.sup = supervise.Supervisor(
        st.pid,
        st.attached,
        st.tree.members,
        lambda: st.returncode is not None or st.proc is None,
        on_sent=st.signal_sent,
    )
    st.status = "running"
    st.spawn(run.sampler.rss_loop, "memscope-rss")
    st.spawn(run.sampler.pss_loop, "memscope-pss")
    st.spawn(lambda: finish_mod.wait_loop(run), "memscope-waiter")
    st.spawn(lambda: _gpu_loop(run), "memscope-gpu")
    st.spawn(finish_mod.load_analyses, "memscope-analyses")  # while the command starts: its end needs them
    if st.proc is not None and st.output_files:
        for name, path in zip(("stdout", "stderr"), st.output_files):
            st.spawn(functools.partial(finish_mod.read_output, run, path, name), f"memscope-{name}")


def _gpu_loop(run: RunParts) -> None:
    # NVML is opened on this thread, not before the run goes: loading pynvml and the driver's library costs
    # 15-25 ms that the start would wait on. Without a driver it returns at once and nothing is recorded.
    st = run.state
    nvml = gpu_mod.Nvml.open()
    if nvml is not None:
        gpu_mod.sample_loop(
            nvml, st.publish, st.elapsed, st.tree.alive_pids, run.sampler.done, st.options.host_interval_s
        )


def _stat(pid: int) -> Any:
    try:
        return procfs.read_stat(pid) if pid > 0 else None
    except OSError:
        return None
