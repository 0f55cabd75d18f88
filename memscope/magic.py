"""%memscope and %%memscope: a thin layer over the CLI's options and the Run.

    %load_ext memscope
    run = %memscope --limit 12G train.py --epochs 3
    %memscope -- bash train.sh
    %memscope --attach 141495
    %memscope --keep-previous train.py          # a re-run of this cell leaves the run it started before going
    run = %memscope --scalene train.py          # under Scalene, profiling off: the "Scalene snapshot" button
    f = %memscope fit --sizes 8,16,32 --target 64 -- python train.py --batch-size {}   # will batch 64 fit?

    %%memscope
    ...cell body runs as a script in the background...      (the run: memscope.last_run())

The cell returns at once; the dashboard follows the run. Bad input prints one line, never a traceback.
Re-running a cell that started a run stops that run first (a person re-running a cell means "restart"); an attached
one is only no longer watched: memscope never signals a process it did not start.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
import weakref
from typing import Any, Callable, Mapping

from IPython.core.magic import Magics, line_cell_magic, magics_class


def widgets_can_render(ip: Any) -> bool:
    """Widgets need a Jupyter kernel's shell with a comm manager (JupyterLab, Notebook 7, VS Code, Colab, Kaggle).

    Decided by what the shell can do, never by its class name: Colab's shell (``google.colab._shell.Shell``) is a
    *subclass* of ipykernel's ``ZMQInteractiveShell``. IPython in a terminal has no kernel and gets text."""
    if ip is None:
        return False
    zmqshell = sys.modules.get("ipykernel.zmqshell")  # a kernel has imported it; a terminal has no reason to
    if zmqshell is None or not isinstance(ip, zmqshell.ZMQInteractiveShell):
        return False
    if getattr(getattr(ip, "kernel", None), "comm_manager", None) is not None:  # ipykernel 6.x and 7.x
        return True
    try:  # kernels that keep it only in the `comm` package
        import comm

        return comm.get_comm_manager() is not None
    except Exception:
        return False


class CellOutput:
    """The lines memscope says about one run (warnings, the end-of-run text), kept for the output area of the cell
    that started it. A print from one of the run's threads would land in whichever cell executes at that moment.

    Lines said before a view is bound are kept and handed to it when it binds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[str] = []
        self._view: Callable[[str], None] | None = None

    def __call__(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            view = self._view
        if view is not None:
            try:
                view(line)
            except Exception:
                pass  # a closed view: the line stays in self.lines

    def bind(self, view: Callable[[str], None]) -> None:
        with self._lock:
            self._view, said = view, list(self.lines)
        for line in said:
            view(line)


class TextArea:
    """A kernel whose frontend renders no widgets: one display in the starting cell, updated in place (by its
    display id, which the frontend resolves wherever the cell is) with the run's lines and its end-of-run text."""

    def __init__(self, head: str) -> None:
        from IPython.display import display

        self._lock = threading.Lock()
        self._lines = [head]
        self._status = ""  # the live status line, under the head, until the end-of-run text replaces it
        self._handle = display(_Text(head), display_id=True)

    def __call__(self, line: str) -> None:
        with self._lock:
            self._lines.append(line.rstrip("\n"))
        self._show()

    def status(self, line: str) -> None:
        """Replace the live status line ("" when the run has ended)."""
        with self._lock:
            self._status = line
        self._show()

    def _show(self) -> None:
        with self._lock:
            text = "\n".join(self._lines[:1] + ([self._status] if self._status else []) + self._lines[1:])
        if self._handle is not None:
            self._handle.update(_Text(text))

    def follow(self, run: Any, period_s: float = 2.0) -> None:
        """Keep the status line current while ``run`` goes (a thread that ends with the run)."""

        def loop() -> None:
            while not run.ended:
                try:
                    self.status(status_text(run))
                except Exception:
                    pass
                time.sleep(period_s)
            self.status("")

        threading.Thread(target=loop, name="memscope-text-status", daemon=True).start()


def status_text(run: Any) -> str:
    """One line: the run's state now and how to stop it (the text view's status line)."""
    from .fmt import fmt_bytes, fmt_elapsed

    s = run.snapshot
    cur = s.tree_pss if s.tree_pss is not None else s.tree_rss
    peak = s.peak_pss or s.peak_rss
    return (
        f"● running {fmt_elapsed(run.elapsed())} · now {fmt_bytes(cur)} · peak {fmt_bytes(peak)} · "
        "the verdict comes at the end · Stop: run.stop()"
    )


class _Text:
    """Plain text for a display (no ANSI colour codes: a notebook shows them as garbage)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def final_text(summary: Mapping[str, Any]) -> str:
    """The end-of-run text as plain lines (the terminal's closing lines, without colour)."""
    import io

    from .ui.terminal import print_final

    buf = io.StringIO()
    print_final(summary, file=buf, plain=True)
    return buf.getvalue().rstrip("\n")


_last: "weakref.ref[Any] | None" = None


def last_run() -> Any:
    """The run the last ``%memscope``, ``%%memscope`` or ``memscope.run()`` of this kernel started (None if none)."""
    return _last() if _last is not None else None


def runs() -> list[Any]:
    """The runs this kernel started that are still going, oldest first (``%memscope``, ``%%memscope``,
    ``memscope.run()``, ``memscope.attach()``): each has ``.stop()``. What a re-run of a cell leaves going where the
    frontend sends no cell id (classic Notebook 6.5) is here too."""
    from .session.run import _started

    going = [r for r in list(_started.values()) if r.pid and not r.ended]
    return sorted(going, key=lambda r: -r.elapsed())


def going_lines(others: list[Any]) -> list[str]:
    """One line per run still going besides the new one, with how to stop it (the text view's words)."""
    from .fmt import fmt_elapsed

    return [
        f"memscope: also going in this kernel: {r.run_id} (pid {r.pid}, {fmt_elapsed(r.elapsed())}, "
        f"{' '.join(r.command)[-80:]}): memscope.runs()[{i}].stop() stops it"
        for i, r in enumerate(others)
    ]


# cell id -> (the execute_request that last started runs in that cell, those runs). A run of an earlier request
# of the same cell is what a re-run stops; runs of the same request (two %memscope lines in one cell) are kept.
_by_cell: dict[str, tuple[str | None, list["weakref.ref[Any]"]]] = {}


def _cell_request() -> tuple[str | None, str | None]:
    """The executing cell's id (None where the frontend sends none) and its execute_request's msg_id."""
    from .ui.dashboard import cell_request

    return cell_request()


def stop_previous(cell: str | None, request: str | None, say: Callable[[str], None]) -> None:
    """Stop the runs an earlier execution of this cell started and still going, as Stop does (SIGINT, grace,
    SIGTERM, SIGKILL), and wait for each to end (bounded), so the new run never overlaps the old one."""
    from .fmt import fmt_elapsed

    if cell is None:
        return
    prev_request, refs = _by_cell.get(cell, (None, []))
    if prev_request == request:
        return
    _by_cell.pop(cell, None)
    for ref in refs:
        old = ref()
        if old is None or old.ended:
            continue
        if old.attached:  # a process memscope did not start is never signalled: stop watching it, no more
            old.detach()
            old.wait(10)
            say(f"memscope: stopped watching pid {old.pid} ({old.run_id}), which goes on")
            continue
        grace = old.options.grace_s
        old.stop(wait=False)
        bound = 2 * grace + 10  # SIGINT, grace, SIGTERM, grace, SIGKILL, then the summary
        summary = old.wait(bound)
        if summary is None:
            say(
                f"memscope: asked the previous run of this cell, {old.run_id}, to stop; it had not ended after {bound:g} s"
            )
        else:
            say(
                f"memscope: stopped the previous run of this cell, {old.run_id}, after "
                f"{fmt_elapsed(summary.get('duration_s') or old.elapsed())}"
            )


def start_in_notebook(argv: list[str] | None, attach: int | None, options: Any, keep_previous: bool = False) -> Any:
    """Start a run with its output captured, and show it in the cell that started it: a dashboard where widgets
    render, its text in place in a kernel that renders none, plain lines in a terminal IPython.

    A run this cell started in an earlier execution is stopped first, unless ``keep_previous``."""
    from IPython import get_ipython

    from .session.run import Run

    global _last
    options.output = "capture"
    ip = get_ipython()
    sink = CellOutput()
    cell, request = _cell_request()
    run = Run(argv, attach=attach, options=options, say=sink)  # bad input is refused here, before anything stops
    if not keep_previous:
        stop_previous(cell, request, sink)
    run.start()
    _last = weakref.ref(run)
    if cell is not None:  # runs kept by --keep-previous stay this cell's: a plain re-run later stops them too
        _, refs = _by_cell.get(cell, (request, []))
        _by_cell[cell] = (
            request,
            [r for r in refs if (held := r()) is not None and not held.ended] + [weakref.ref(run)],
        )
    if widgets_can_render(ip):
        from .ui.dashboard import show

        sink.bind(show(run, [r for r in runs() if r is not run]).note)
    elif ip is not None and getattr(ip, "kernel", None) is not None:
        area = TextArea(f"memscope: started {run.run_id} (pid {run.pid}); record {run.record_path}")
        sink.bind(area)
        for line in going_lines([r for r in runs() if r is not run]):
            area(line)
        area.follow(run)
        run.on_end(lambda r: area(final_text(r.wait() or {})))
    else:  # IPython in a terminal: lines on stderr, as `memscope run` prints them
        from .ui.terminal import print_final

        sink.bind(lambda line: print(line, file=sys.stderr))
        print(
            f"memscope: started {run.run_id} (pid {run.pid}); record {run.record_path}; Stop: run.stop() "
            "(memscope.runs() lists the runs going)",
            file=sys.stderr,
        )
        for line in going_lines([r for r in runs() if r is not run]):
            print(line, file=sys.stderr)
        run.on_end(lambda r: print_final(r.wait() or {}))
    return run


@magics_class
class MemscopeMagics(Magics):
    @line_cell_magic
    def memscope(self, line: str, cell: str | None = None) -> Any:
        from .cli.options import Parser, add_run_options, options_from
        from .errors import LaunchError

        if cell is None and line.split()[:1] == ["fit"]:
            return _fit_magic(line)
        p = Parser(prog="%memscope", add_help=True)
        add_run_options(p)
        p.add_argument("--attach", type=int, metavar="PID")
        p.add_argument(
            "--keep-previous",
            action="store_true",
            help="leave going the run an earlier execution of this cell started (a re-run stops it by default)",
        )
        p.add_argument("command", nargs="...")
        try:
            ns = p.parse_args(shlex.split(line))
        except SystemExit:
            return None  # the parser printed its one line
        argv = list(ns.command)
        if argv and argv[0] == "--":
            argv = argv[1:]
        try:
            if cell is not None:
                argv = [_cell_script(cell, ns.record)] + argv
            if ns.attach is None and not argv:
                raise LaunchError("no command given: %memscope train.py [args] | %memscope -- CMD [args]")
            run = start_in_notebook(argv or None, ns.attach, options_from(ns), keep_previous=ns.keep_previous)
            # %%memscope shows its dashboard and nothing under it (no "Out[n]: <memscope.Run ...>"): the run is
            # memscope.last_run(). The line magic returns it, for `run = %memscope train.py`.
            return None if cell is not None else run
        except LaunchError as exc:
            print(f"memscope: {exc}", file=sys.stderr)
            return None


def _fit_magic(line: str) -> Any:
    """``%memscope fit --sizes 8,16,32 [--target 64] ... -- CMD {}``: the fit, drawn live; returns the Fit."""
    from .cli.fit import FitCommand
    from .cli.options import Parser
    from .errors import LaunchError

    p = Parser(prog="%memscope fit", add_help=True)
    FitCommand().prepare_parser(p)
    try:
        ns = p.parse_args(shlex.split(line)[1:])
    except SystemExit:
        return None  # the parser printed its one line
    try:
        return start_fit(
            ns.command,
            ns.sizes,
            target=ns.target,
            limit=ns.limit,
            margin=ns.margin,
            for_s=ns.for_s,
            record_dir=ns.record,
        )
    except LaunchError as exc:
        print(f"memscope: {exc}", file=sys.stderr)
        return None


def start_fit(
    command: list[str],
    sizes: Any,
    *,
    target: int | None = None,
    limit: int | str | None = None,
    margin: float | str = 0.1,
    for_s: float | None = None,
    record_dir: str | None = None,
    wait: bool | None = None,
    **options: Any,
) -> Any:
    """``memscope.fit`` and ``%memscope fit``: check everything (LaunchError: one line, nothing started), then
    run the probes: in a notebook on their own thread with the live chart (the kernel stays free), else here."""
    import argparse

    from IPython import get_ipython

    from .cli.options import _share, parse_size
    from .errors import LaunchError
    from .session.fit import Fit, check_sizes, parse_sizes

    try:
        limit_bytes = parse_size(limit) if isinstance(limit, str) else limit
        share = _share(margin) if isinstance(margin, str) else margin
    except argparse.ArgumentTypeError as exc:
        raise LaunchError(str(exc)) from None
    size_list = parse_sizes(sizes) if isinstance(sizes, str) else check_sizes(list(sizes))
    ip = get_ipython() if "IPython" in sys.modules else None
    notebook = widgets_can_render(ip)
    lines: list[str] = []
    fit = Fit(
        command,
        size_list,
        target=target,
        limit_bytes=limit_bytes,
        margin=share,
        for_s=for_s,
        record_dir=record_dir,
        say=lines.append,
        **options,
    )
    if not notebook:
        if wait is False:
            return fit.start()
        fit.run()
        return fit
    from IPython.display import display

    from .ui.fit_view import FitView

    view = FitView(fit, title="will size " + str(fit.target) + " fit?")
    display(view)
    fit.start()
    if wait:
        fit.wait()
    return fit


def _cell_script(body: str, record_dir: str | None) -> str:
    """%%memscope: the cell's body becomes a script, kept beside the records so the run can be re-read."""
    from .record.catalogue import default_record_dir

    d = os.path.join(record_dir or default_record_dir(), "cells")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"cell-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.py")
    with open(path, "w") as f:
        f.write(body)
    return path


def load(ip: Any) -> None:
    ip.register_magics(MemscopeMagics)
