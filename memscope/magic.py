"""%memscope and %%memscope: a thin layer over the CLI's options and the Run.

    %load_ext memscope
    run = %memscope --limit 12G train.py --epochs 3
    %memscope -- bash train.sh
    %memscope --attach 141495
    run = %memscope --scalene train.py          # under Scalene, profiling off: the "Scalene snapshot" button

    %%memscope
    ...cell body runs as a script in the background...

The cell returns at once; the dashboard follows the run. Bad input prints one line, never a traceback.
"""
from __future__ import annotations

import os
import shlex
import sys
import time
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class


def widgets_can_render(ip: Any) -> bool:
    """Widgets need a kernel with a frontend (Jupyter, VS Code, Colab); IPython in a terminal has none."""
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def start_in_notebook(argv: list[str] | None, attach: int | None, options: Any) -> Any:
    """Start a run with its output captured, and show it: a dashboard, or text where widgets cannot render."""
    from IPython import get_ipython

    from .session import Run

    options.output = "capture"
    run = Run(argv, attach=attach, options=options).start()
    ip = get_ipython()
    if widgets_can_render(ip):
        from .ui.dashboard import show

        show(run)
    else:
        from .ui.terminal import print_final

        print(f"memscope: started {run.run_id} (pid {run.pid}); record {run.record_path}", file=sys.stderr)
        run.on_end(lambda r: print_final(r.wait() or {}))
    return run


@magics_class
class MemscopeMagics(Magics):
    @line_cell_magic
    def memscope(self, line: str, cell: str | None = None) -> Any:
        from .cli.options import Parser, add_run_options, options_from
        from .errors import LaunchError

        p = Parser(prog="%memscope", add_help=True)
        add_run_options(p)
        p.add_argument("--attach", type=int, metavar="PID")
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
            return start_in_notebook(argv or None, ns.attach, options_from(ns))
        except LaunchError as exc:
            print(f"memscope: {exc}", file=sys.stderr)
            return None


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
