"""A run's end: what is left of the tree cleaned up, the output read to its end, the crash files collected, the
summary written, and every thread and file let go. Whatever fails in here, the run still reaches "ended".
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

from .. import outfile, supervise
from ..collect.output import LineReader, follow
from ..collect.tree import alive
from ..fmt import decode_wait_status, signal_name
from ..model import Event, ExitInfo, RunEnded, Summary
from ..record.reader import RunData
from ..record.writer import record_health
from .parts import RunParts
from .state import RunState

SUMMARY_SYNC_S = 60.0  # how long the end waits for the record writer to catch up before summarizing


def load_analyses() -> None:
    """The analyses the run needs at its end (the summary, exit causes, stacks, census, Scalene's windows), and
    on requests while it goes: imported on a thread of their own once the command is launched, not before. They
    are a third of the engine's imports; the start waited on them, and a short command's end did too. Whoever
    needs one first (summarize_record, a census, a stacks capture) takes it from here or, if this thread is
    still importing it, waits on the import lock for the whole module."""
    from ..analysis import summary  # noqa: F401  (it imports census, exit_cause, stacks, scalene and the rest)


def wait_loop(run: RunParts) -> None:
    """The waiter thread: wait for the root (os.wait4 on a child; polling an attached pid), then finish."""
    st = run.state
    if st.proc is not None:
        rc, maxrss = supervise.wait_root(st.pid)
        if rc is not None:
            st.returncode = rc
            st.proc.returncode = rc  # keep Popen from reaping again
            # Only a peak above memscope's own says anything of the run's: below it, it may be this process's
            # memory, inherited by the child through fork and exec (a test process or kernel of 337 MiB made a
            # 35 MiB training look near its 300 MiB limit).
            floor = st.launcher_peak
            st.maxrss = maxrss if maxrss is not None and (floor is None or maxrss > floor) else None
        st.root_exited.set()
    else:
        while alive(st.pid) and not st.ended_early.wait(st.options.interval_s):
            pass
        if not st.detached:
            st.root_exited.set()
    finish(run)


def finish(run: RunParts) -> None:
    """End the run: every step below, then "ended" whatever happened, then the subscribers and on_end callbacks."""
    st = run.state
    try:
        _finish_steps(run)
    except Exception as exc:
        if not st.summary:
            failed = exit_info(st, "unknown", f"memscope failed while finishing: {exc!r}")
            failed["code"] = st.returncode
            st.summary = {"schema": "memscope.summary/1", "run_id": st.run_id, "exit": failed}
        summary = st.summary
        st.exit = summary["exit"]
        if st.options.summary_json:
            try:
                write_json(st.options.summary_json, summary)
            except OSError as exc:
                _say_unwritten(st, exc)
    finally:
        shutil.rmtree(run.agents.dir, ignore_errors=True)  # the socket and crash files, whatever happened
        _close_kmsg(st)
        st.output_done.set()
        st.output_stop.set()  # a detached run writes on: its output stays in its files, nobody reads it now
        if st.subreaper:
            st.subreaper = False
            supervise.release_subreaper()
        supervise.forget_launched(st.pid)
        st.status = "ended"
        st.ended.set()
    st.subs.close()
    for fn in st.on_end:
        try:
            fn()
        except Exception:
            pass


def _finish_steps(run: RunParts) -> None:
    st = run.state
    t = st.elapsed()
    run.stack_taker.settle()  # a capture under way (a signal can end a blocking call) reaches the record first
    tree = st.tree
    if st.proc is not None and st.returncode is not None:
        code, sig = (None, signal_name(-st.returncode)) if st.returncode < 0 else (st.returncode, None)
        tree.mark_exited(st.pid, code, sig)
    if not st.detached:
        try:
            tree.pss_round()  # the last PSS of whatever is still alive
        except Exception:
            pass
        _clean_leftovers(st)
    run.sampler.done.set()
    for th in st.threads:
        if th.name in ("memscope-rss", "memscope-pss"):
            th.join(timeout=5)
    if not st.detached:  # a detached run's processes go on writing to its output files
        _end_output(st)
    running = set(tree.unsignalled())  # still alive, and said so: not "exited"
    for pid in tree.alive_pids():
        if st.detached:
            break
        if pid not in running or not supervise.same_process(pid, tree.procs[pid].start):
            tree.mark_exited(pid, None, None)
    try:
        run.sampler.host_sample(run.sampler.cg)  # OOM counters after the end: the evidence for an OOM kill
    except Exception:
        pass
    run.agents.collect_crash_files()
    run.agents.close()
    if st.kmsg is not None:  # whom the OOM killer took: the cgroup's counter counts its other processes too
        victims = st.kmsg.victims()
        _close_kmsg(st)
        oom = [{"pid": p, "name": n} for p, n in (victims or [])[-100:]]
        st.publish(Event(t, None, "kernel_log", {"readable": victims is not None, "oom_victims": oom}))
    tree.settle()  # the main weighed with everything known at the end (failures recorded inside processes)
    st.publish(
        Event(
            t,
            st.pid,
            "exit_status",
            {
                "returncode": st.returncode,
                "maxrss_bytes": st.maxrss,
                "stop_requested": st.stop_requested,
                "detached": st.detached,
            },
        )
    )
    summary = summarize_record(st)
    if st.detached:
        summary["exit"] = exit_info(st, "detached", f"memscope stopped watching; pid {st.pid} is still running.")
    summary["duration_s"] = round(t, 3)
    st.summary, st.exit = summary, summary["exit"]
    st.publish(RunEnded(t, summary))
    st.recorder.close()
    if st.options.summary_json:
        try:
            write_json(st.options.summary_json, summary)
        except OSError as exc:  # the run's own summary is still returned; the user is told once
            _say_unwritten(st, exc)


def _clean_leftovers(st: RunState) -> None:
    """Once the root is gone, no process of the tree may outlive the run."""
    if st.detached or st.attached:
        return
    tree = st.tree
    tree.all_marked()  # one last full discovery: escapees, orphans re-parented to memscope
    left = st.sup.clean_leftovers(
        {p: start for p, start in tree.members().items() if p != st.pid},
        st.stop_requested,
        lambda pids: st.publish(
            Event(
                st.elapsed(),
                None,
                "leftovers",
                {
                    "pids": pids,
                    "processes": [
                        {
                            "pid": p,
                            "name": tree.procs[p].info.name,
                            "cmdline": " ".join(tree.procs[p].info.cmdline)[:200],
                        }
                        for p in pids
                        if p in tree.procs
                    ],
                },
            )
        ),
    )
    for pid, status in left.items():
        tree.mark_exited(pid, *decode_wait_status(status))
    kept = [p for p in tree.unsignalled() if p != st.pid]
    if kept:
        st.publish(
            Event(
                st.elapsed(),
                None,
                "left_running",
                {
                    "pids": kept,
                    "processes": [{"pid": p, "cmdline": " ".join(tree.procs[p].info.cmdline)[:200]} for p in kept],
                },
            )
        )


def summarize_record(st: RunState) -> Summary:
    """The summary as the record says it now. Everything published so far is flushed first: a summary read
    from a record its writer has not caught up with would judge a shorter run than the one that ran, so the
    wait is long (a loaded machine can put the writer seconds behind), and a summary that had to go without
    says so in ``record_errors``."""
    from ..analysis.summary import summarize  # loaded while the run goes (finish.load_analyses)

    synced = st.recorder.sync(SUMMARY_SYNC_S)
    # A record the disk refused in part: the summary reads it as memscope knows it (file + memory).
    rd = RunData(st.record_path, st.recorder.memory_copy() if st.recorder.lost_records else None)
    try:
        s = summarize(rd)
    finally:
        rd.close()
    health = record_health(st.recorder, st.agent_server)
    if not synced:
        health = dict(
            health or {},
            unsynced=f"the record's writer was still behind after {SUMMARY_SYNC_S:g} s: "
            "this summary may miss the run's last records",
        )
    if health:
        s["record_errors"] = health
    return s


def exit_info(st: RunState, cause: str, message: str) -> ExitInfo:
    """An ``exit`` object for the states the record cannot tell: running, detached, memscope failed."""
    return {"cause": cause, "code": None, "signal": None, "pid": st.pid, "message": message, "traceback": None}


def read_output(run: RunParts, path: str, name: str) -> None:
    """A reader thread (capture mode): the run's output file ``path`` as "output" events and the live tail."""
    st = run.state

    def on_text(text: str) -> None:
        run.stack_taker.last_output_t = st.elapsed()  # the stall watch: printing is progress
        st.publish(Event(st.elapsed(), st.pid, "output", {"stream": name, "text": text}))

    reader = LineReader(on_text, st.output_tail)
    st.readers[name] = reader
    follow(path, reader, st.output_done, stop=st.output_stop)


OUTPUT_JOIN_S = 10.0  # how long the end waits for the readers to reach the end of the output files


def _end_output(st: RunState) -> None:
    """Once every process of the run is gone: read the output files to their end, then remove them (what they
    held is in the record). A reader that has not finished in OUTPUT_JOIN_S is stopped (what is left is counted,
    not recorded): nothing reads on, or grows, after the run has ended."""
    st.output_done.set()
    readers = [th for th in st.threads if th.name in ("memscope-stdout", "memscope-stderr")]
    deadline = time.monotonic() + OUTPUT_JOIN_S
    for th in readers:
        th.join(timeout=max(0.0, deadline - time.monotonic()))
    if any(th.is_alive() for th in readers):
        st.output_stop.set()
        for th in readers:
            th.join(timeout=5)
    for name, reader in sorted(st.readers.items()):
        if reader.dropped_bytes:
            st.publish(
                Event(
                    st.elapsed(),
                    None,
                    "collector_degraded",
                    {
                        "what": "output",
                        "stream": name,
                        "recorded_bytes": reader.recorded_bytes,
                        "kept_bytes": reader.kept_bytes,
                        "dropped_bytes": reader.dropped_bytes,
                    },
                )
            )
    if st.output_files and not any(th.is_alive() for th in readers):
        for path in st.output_files:
            try:
                os.unlink(path)
            except OSError:
                pass


def _close_kmsg(st: RunState) -> None:
    if st.kmsg is not None:
        st.kmsg.close()
        st.kmsg = None


def abort(run: RunParts) -> None:
    """The run could not start: let go of everything it holds and leave no record behind."""
    st = run.state
    _close_kmsg(st)
    for a in list(run.attachments.values()):
        a.close()
    run.attachments.clear()
    if st.subreaper:
        st.subreaper = False
        supervise.release_subreaper()
    if run.agents.server is not None:
        run.agents.server.close()
    st.recorder.close()
    try:
        os.unlink(st.record_path)
        for path in [st.record_path + "-wal", st.record_path + "-shm", *(st.output_files or ())]:
            if os.path.exists(path):
                os.unlink(path)
    except OSError:
        pass
    shutil.rmtree(run.agents.dir, ignore_errors=True)


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` as shell redirection would (``outfile``): a regular file whole or not at all,
    a symlink followed, a FIFO, a device or /dev/stdout written to, never replaced."""
    outfile.write_text(path, json.dumps(obj, indent=2) + "\n")


def _say_unwritten(st: RunState, exc: OSError) -> None:
    # One line: ENOSPC from a full device, EPIPE from a reader that left, no reader on a FIFO.
    st.say(f"memscope: cannot write the summary to {st.options.summary_json}: {exc.strerror or exc}")
