"""``memscope run``: a command (or a running tree, --attach) under memscope, with the live terminal view."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any, ClassVar

from ..errors import LaunchError
from .options import add_run_options, options_from

SAME_EVENT_S = 0.5  # copies of one signal closer than this are one event (see on_signal)


def exit_status(returncode: int | None) -> int:
    """The command's own status, as a shell reports it: 128+N for death by signal N."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode


class RunCommand:
    """run a command under memscope"""

    name: ClassVar[str] = "run"
    usage: ClassVar[str | None] = "memscope run [options] script.py [args] | memscope run [options] -- CMD [args]"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The run options, --attach, and the command."""
        add_run_options(parser)
        parser.add_argument("--attach", type=int, metavar="PID", help="watch a running process tree (sampling only)")
        parser.add_argument("command", nargs=argparse.REMAINDER, help="script.py [args], or -- CMD [args]")

    def run(self, ns: argparse.Namespace, command: list[str] | None = None) -> int:
        """Run it to its end; the exit status is the command's own."""
        # Imported here, not at the top: `memscope ls` or `--help` need none of the engine (the CLI is the top
        # layer, one of the few places that import lazily).
        from .. import supervise
        from ..model import Event
        from ..session.options import check_summary_path
        from ..session.run import Run

        argv = list(command if command is not None else ns.command)
        if argv and argv[0] == "--":
            argv = argv[1:]
        attach = getattr(ns, "attach", None)
        if attach is not None and argv:
            raise LaunchError("give either --attach PID or a command, not both")
        if attach is None and not argv:
            raise LaunchError("no command given: memscope run train.py [args] | memscope run -- CMD [args]")
        if ns.summary_json:
            check_summary_path(ns.summary_json)
        supervise.declare_sole_launcher()  # this process starts nothing but the run: its orphans are the run's
        slurm = supervise.slurm_launcher()  # now: a batch script's shell may be gone by the time a signal comes
        run = Run(argv or None, attach=attach, options=options_from(ns))
        presses = {"n": 0}
        # The last press counted: its signal, and when its handling ended (a copy that arrived before then, or
        # within SAME_EVENT_S after, is the same event).
        last = {"sig": 0, "end": -1e9}
        hup = {"end": -1e9}  # the same for SIGHUP, which is passed on, never counted as a press
        user: dict[int, float] = {signal.SIGUSR1: -1e9, signal.SIGUSR2: -1e9}  # the same for each user signal
        view: Any = None  # the live status line (ui.terminal.TerminalView), once the run is going
        suspended = {"by_us": False}  # Ctrl-Z stopped the run: only then does a SIGCONT continue it

        pending: list[int] = []
        arrived: list[tuple[int, float]] = []  # signals received, in order, with when they came
        busy = {"on": False}

        def on_signal(signum: int, _frame: object) -> None:
            # CPython runs this handler again from inside itself when another signal lands while it runs (`timeout`
            # sends its two copies ~0.2 ms apart). The nested call only notes the arrival: the outer call acts on
            # it once done with the first, in order, so no state is seen half-updated and no lock the outer call
            # holds is taken again (that deadlocked: the run got no signal at all and memscope hung).
            arrived.append((signum, time.monotonic()))
            if busy["on"]:
                return
            busy["on"] = True
            try:
                while arrived:
                    sig, t = arrived.pop(0)
                    act(sig, t)
            finally:
                busy["on"] = False

        def act(signum: int, t: float) -> None:
            # Like systemd and docker: SIGTERM is passed on (a training may checkpoint on it), SIGKILL only after the
            # grace period; Ctrl-C stops gracefully; a second SIGINT or SIGTERM kills.
            if run.status == "starting":
                pending.append(signum)  # acted on right after start(), below
                return
            if signum == signal.SIGHUP:
                # One hangup, one copy passed on: a closed terminal's SIGHUP reaches memscope from the kernel and
                # again from the shell that re-sends it to its jobs (`timeout -s HUP`: memscope, then its group).
                if t < hup["end"] + SAME_EVENT_S:
                    return
                hup["end"] = float("inf")
                try:
                    if run.attached:
                        run.detach()
                    else:
                        run.forward(signal.SIGHUP)  # a hangup reaches the foreground group: the run's too
                finally:
                    hup["end"] = time.monotonic()
                return
            if signum in user:
                user_signal(signum, t)
                return
            # One event, one press: `timeout` (and kill -TERM -PGID) sends SIGTERM to memscope and again to its
            # process group, which memscope is in: two copies microseconds apart. A copy of the signal last counted
            # that arrived while it was being handled, or within SAME_EVENT_S after, is the same event; a person's
            # second Ctrl-C comes later than that.
            if last["sig"] == signum and t < last["end"] + SAME_EVENT_S:
                return
            if signum == signal.SIGTERM and not run.attached:
                by = supervise.scheduler_signals_run(run.pid, slurm)
                if by is not None:  # the training has its own copy: a second one is "force quit" to many
                    last["sig"], last["end"] = signum, time.monotonic()
                    name = signal.Signals(signum).name
                    sys.stderr.write(f"\nmemscope: {name}: {by} signals every process of the step; not passed on\n")
                    run.publish(Event(run.elapsed(), None, "signal_not_forwarded", {"signal": name, "scheduler": by}))
                    return
            last["sig"], last["end"] = signum, float("inf")  # counted now: until its handling ends, any copy is it
            presses["n"] += 1
            try:
                press(signum)
            finally:
                last["end"] = time.monotonic()  # from the end: a slow handler does not widen a gap

        def user_signal(signum: int, t: float) -> None:
            # SIGUSR1/2 (Slurm's --signal=USR1@60, a person's kill -USR1 asking for a checkpoint) are meant for the
            # training; their default action killed memscope, its record ending there. Passed on once to the
            # training where it catches the signal; never where a scheduler signals the run itself.
            if t < user[signum] + SAME_EVENT_S:
                return
            user[signum] = float("inf")
            name = signal.Signals(signum).name
            try:
                by = None if run.attached else supervise.scheduler_signals_run(run.pid, slurm)
                if by is not None:
                    sys.stderr.write(f"\nmemscope: {name}: {by} signals every process of the step; not passed on\n")
                    run.publish(Event(run.elapsed(), None, "signal_not_forwarded", {"signal": name, "scheduler": by}))
                elif run.attached or not run.pass_on(signum):
                    sys.stderr.write(f"\nmemscope: {name}: the training does not catch it; not passed on\n")
            finally:
                user[signum] = time.monotonic()

        def press(signum: int) -> None:
            if run.attached:
                run.detach()
            elif presses["n"] == 1 and signum == signal.SIGINT:
                if view is not None:
                    view.note = "stopping… (Ctrl-C again to kill)"
                else:
                    sys.stderr.write("\nmemscope: stopping the run (Ctrl-C again to kill)\n")
                run.stop(wait=False)
            elif presses["n"] == 1 and signum == signal.SIGTERM:
                sys.stderr.write(f"\nmemscope: SIGTERM: passing it on to the run, SIGKILL in {ns.grace:g} s\n")
                run.terminate(wait=False)
            else:
                run.kill(wait=False)

        def on_tstp(_signum: int, _frame: object) -> None:
            # Ctrl-Z: the run is in a session of its own, so the terminal's SIGTSTP reached memscope alone. Stop
            # the run, then memscope itself (the shell's job control sees memscope stopped and says so).
            if run.status != "starting" and not run.attached:
                suspended["by_us"] = True
                run.suspend()
            os.kill(os.getpid(), signal.SIGSTOP)

        def on_cont(_signum: int, _frame: object) -> None:
            # Only a run memscope stopped (Ctrl-Z) is continued: `timeout` sends SIGCONT after each SIGTERM, and
            # passing that on was a signal nobody sent the run.
            if suspended["by_us"] and run.status != "starting" and not run.attached:
                suspended["by_us"] = False
                run.resume()

        # Handlers first: a Ctrl-C must never leave the run behind, not even during start-up. A SIGHUP that was
        # ignored when memscope started (nohup) stays ignored, for memscope and the run alike.
        handled = [signal.SIGINT, signal.SIGTERM]
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            if signal.getsignal(sig) != signal.SIG_IGN:
                handled.append(sig)
        for sig in handled:
            signal.signal(sig, on_signal)
        if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
            signal.signal(signal.SIGTSTP, on_tstp)
        signal.signal(signal.SIGCONT, on_cont)
        run.start()
        for signum in dict.fromkeys(pending):  # signals during start-up, each kind once: now act on them
            on_signal(signum, None)
        if run.exporter is not None and run.exporter.url and not ns.quiet:
            sys.stderr.write(f"memscope: Prometheus metrics at {run.exporter.url}\n")
        if not ns.quiet:  # rich is imported while the run starts, not before it: the start waits on nothing
            from ..ui.terminal import TerminalView

            view = TerminalView(run).start() if TerminalView.wanted() else None
        try:
            while not run.ended:
                run.wait(0.5)  # wakes the moment the run ends; signal handlers still run meanwhile (PEP 475)
        finally:
            if view is not None:
                view.close()
        summary = run.wait() or {}
        if not ns.quiet:
            from ..ui.terminal import print_final

            print_final(summary)
        if run.exporter is not None:  # the final push, and the last scrape of the final state
            from ..export.prometheus import PUSH_TIMEOUT_S

            run.exporter.wait_closed(run.options.prometheus_linger_s + PUSH_TIMEOUT_S + 5)
        return exit_status(run.returncode)
