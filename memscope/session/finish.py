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
from ..model import Event, RunEnded
from ..record.reader import RunData
from ..record.writer import record_health

# Parts of a Run take the Run itself, typed Any: run.py imports this module, and a type-only import back would
# be a circle in the import graph.
Run = Any

SUMMARY_SYNC_S = 60.0  # how long the end waits for the record writer to catch up before summarizing


def load_analyses() -> None:
    """The analyses the run needs at its end (the summary, exit causes, stacks, census, Scalene's windows), and
    on requests while it goes: imported on a thread of their own once the command is launched, not before. They
    are a third of the engine's imports; the start waited on them, and a short command's end did too. Whoever
    needs one first (summarize_record, a census, a stacks capture) takes it from here or, if this thread is
    still importing it, waits on the import lock for the whole module."""
    from ..analysis import summary  # noqa: F401  (it imports census, exit_cause, stacks, scalene and the rest)


def wait_loop(run: Run) -> None:
    """The waiter thread: wait for the root (os.wait4 on a child; polling an attached pid), then finish."""
    if run._proc is not None:
        rc, maxrss = supervise.wait_root(run.pid)
        if rc is not None:
            run.returncode = rc
            run._proc.returncode = rc  # keep Popen from reaping again
            # Only a peak above memscope's own says anything of the run's: below it, it may be this process's
            # memory, inherited by the child through fork and exec (a test process or kernel of 337 MiB made a
            # 35 MiB training look near its 300 MiB limit).
            floor = run._launcher_peak
            run._maxrss = maxrss if maxrss is not None and (floor is None or maxrss > floor) else None
        run._root_exited.set()
    else:
        while alive(run.pid) and not run._ended_early.wait(run.options.interval_s):
            pass
        if not run._detached:
            run._root_exited.set()
    finish(run)


def finish(run: Run) -> None:
    """End the run: every step below, then "ended" whatever happened, then the subscribers and on_end callbacks."""
    try:
        _finish_steps(run)
    except Exception as exc:
        run._summary = run._summary or {
            "schema": "memscope.summary/1",
            "run_id": run.run_id,
            "exit": dict(exit_info(run, "unknown", f"memscope failed while finishing: {exc!r}"), code=run.returncode),
        }
        run.exit = run._summary["exit"]
        if run.options.summary_json:
            try:
                write_json(run.options.summary_json, run._summary)
            except OSError as exc:
                _say_unwritten(run, exc)
    finally:
        shutil.rmtree(run.agents.dir, ignore_errors=True)  # the socket and crash files, whatever happened
        _close_kmsg(run)
        run._output_done.set()
        run._output_stop.set()  # a detached run writes on: its output stays in its files, nobody reads it now
        if run._subreaper:
            run._subreaper = False
            supervise.release_subreaper()
        supervise.forget_launched(run.pid)
        run.status = "ended"
        run._ended.set()
    run._subs.close()
    for fn in run._on_end:
        try:
            fn(run)
        except Exception:
            pass


def _finish_steps(run: Run) -> None:
    t = run.elapsed()
    run.stack_taker.settle()  # a capture under way (a signal can end a blocking call) reaches the record first
    tree = run.tree
    if run._proc is not None and run.returncode is not None:
        code, sig = (None, signal_name(-run.returncode)) if run.returncode < 0 else (run.returncode, None)
        tree.mark_exited(run.pid, code, sig)
    if not run._detached:
        try:
            tree.pss_round()  # the last PSS of whatever is still alive
        except Exception:
            pass
        _clean_leftovers(run)
    run.sampler.done.set()
    for th in run._threads:
        if th.name in ("memscope-rss", "memscope-pss"):
            th.join(timeout=5)
    if not run._detached:  # a detached run's processes go on writing to its output files
        _end_output(run)
    running = set(tree.unsignalled())  # still alive, and said so: not "exited"
    for pid in tree.alive_pids():
        if run._detached:
            break
        if pid not in running or not supervise.same_process(pid, tree.procs[pid].start):
            tree.mark_exited(pid, None, None)
    try:
        run.sampler.host_sample(run.sampler.cg)  # OOM counters after the end: the evidence for an OOM kill
    except Exception:
        pass
    run.agents.collect_crash_files()
    run.agents.close()
    if run._kmsg is not None:  # whom the OOM killer took: the cgroup's counter counts its other processes too
        victims = run._kmsg.victims()
        _close_kmsg(run)
        oom = [{"pid": p, "name": n} for p, n in (victims or [])[-100:]]
        run.publish(Event(t, None, "kernel_log", {"readable": victims is not None, "oom_victims": oom}))
    tree.settle()  # the main weighed with everything known at the end (failures recorded inside processes)
    run.publish(
        Event(
            t,
            run.pid,
            "exit_status",
            {
                "returncode": run.returncode,
                "maxrss_bytes": run._maxrss,
                "stop_requested": run._stop_requested,
                "detached": run._detached,
            },
        )
    )
    summary = summarize_record(run)
    if run._detached:
        summary["exit"] = exit_info(run, "detached", f"memscope stopped watching; pid {run.pid} is still running.")
    summary["duration_s"] = round(t, 3)
    run._summary, run.exit = summary, summary["exit"]
    run.publish(RunEnded(t, summary))
    run._recorder.close()
    if run.options.summary_json:
        try:
            write_json(run.options.summary_json, summary)
        except OSError as exc:  # the run's own summary is still returned; the user is told once
            _say_unwritten(run, exc)


def _clean_leftovers(run: Run) -> None:
    """Once the root is gone, no process of the tree may outlive the run."""
    if run._detached or run.attached:
        return
    tree = run.tree
    tree.all_marked()  # one last full discovery: escapees, orphans re-parented to memscope
    left = run._sup.clean_leftovers(
        {p: st for p, st in tree.members().items() if p != run.pid},
        run._stop_requested,
        lambda pids: run.publish(
            Event(
                run.elapsed(),
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
    kept = [p for p in tree.unsignalled() if p != run.pid]
    if kept:
        run.publish(
            Event(
                run.elapsed(),
                None,
                "left_running",
                {
                    "pids": kept,
                    "processes": [{"pid": p, "cmdline": " ".join(tree.procs[p].info.cmdline)[:200]} for p in kept],
                },
            )
        )


def summarize_record(run: Run) -> dict[str, Any]:
    """The summary as the record says it now. Everything published so far is flushed first: a summary read
    from a record its writer has not caught up with would judge a shorter run than the one that ran, so the
    wait is long (a loaded machine can put the writer seconds behind), and a summary that had to go without
    says so in ``record_errors``."""
    from ..analysis.summary import summarize  # loaded while the run goes (finish.load_analyses)

    synced = run._recorder.sync(SUMMARY_SYNC_S)
    # A record the disk refused in part: the summary reads it as memscope knows it (file + memory).
    rd = RunData(run.record_path, run._recorder.memory_copy() if run._recorder.lost_records else None)
    try:
        s = summarize(rd)
    finally:
        rd.close()
    health = record_health(run._recorder, run.agents.server)
    if not synced:
        health = dict(
            health or {},
            unsynced=f"the record's writer was still behind after {SUMMARY_SYNC_S:g} s: "
            "this summary may miss the run's last records",
        )
    if health:
        s["record_errors"] = health
    return s


def exit_info(run: Run, cause: str, message: str) -> dict[str, Any]:
    """An ``exit`` object for the states the record cannot tell: running, detached, memscope failed."""
    return {"cause": cause, "code": None, "signal": None, "pid": run.pid, "message": message, "traceback": None}


def read_output(run: Run, path: str, name: str) -> None:
    """A reader thread (capture mode): the run's output file ``path`` as "output" events and the live tail."""

    def on_text(text: str) -> None:
        run.stack_taker.last_output_t = run.elapsed()  # the stall watch: printing is progress
        run.publish(Event(run.elapsed(), run.pid, "output", {"stream": name, "text": text}))

    reader = LineReader(on_text, run.output_tail)
    run._readers[name] = reader
    follow(path, reader, run._output_done, stop=run._output_stop)


OUTPUT_JOIN_S = 10.0  # how long the end waits for the readers to reach the end of the output files


def _end_output(run: Run) -> None:
    """Once every process of the run is gone: read the output files to their end, then remove them (what they
    held is in the record). A reader that has not finished in OUTPUT_JOIN_S is stopped (what is left is counted,
    not recorded): nothing reads on, or grows, after the run has ended."""
    run._output_done.set()
    readers = [th for th in run._threads if th.name in ("memscope-stdout", "memscope-stderr")]
    deadline = time.monotonic() + OUTPUT_JOIN_S
    for th in readers:
        th.join(timeout=max(0.0, deadline - time.monotonic()))
    if any(th.is_alive() for th in readers):
        run._output_stop.set()
        for th in readers:
            th.join(timeout=5)
    for name, reader in sorted(run._readers.items()):
        if reader.dropped_bytes:
            run.publish(
                Event(
                    run.elapsed(),
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
    if run.output_files and not any(th.is_alive() for th in readers):
        for path in run.output_files:
            try:
                os.unlink(path)
            except OSError:
                pass


def _close_kmsg(run: Run) -> None:
    if run._kmsg is not None:
        run._kmsg.close()
        run._kmsg = None


def abort(run: Run) -> None:
    """The run could not start: let go of everything it holds and leave no record behind."""
    _close_kmsg(run)
    for a in list(run.attachments.values()):
        a.close()
    run.attachments.clear()
    if run._subreaper:
        run._subreaper = False
        supervise.release_subreaper()
    if run.agents.server is not None:
        run.agents.server.close()
    run._recorder.close()
    try:
        os.unlink(run.record_path)
        for path in [run.record_path + "-wal", run.record_path + "-shm", *(run.output_files or ())]:
            if os.path.exists(path):
                os.unlink(path)
    except OSError:
        pass
    shutil.rmtree(run.agents.dir, ignore_errors=True)


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` as shell redirection would (``outfile``): a regular file whole or not at all,
    a symlink followed, a FIFO, a device or /dev/stdout written to, never replaced."""
    outfile.write_text(path, json.dumps(obj, indent=2) + "\n")


def _say_unwritten(run: Run, exc: OSError) -> None:
    # One line: ENOSPC from a full device, EPIPE from a reader that left, no reader on a FIFO.
    run.say(f"memscope: cannot write the summary to {run.options.summary_json}: {exc.strerror or exc}")
