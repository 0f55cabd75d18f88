"""The live terminal view of ``memscope run``: a few lines pinned to the bottom of the terminal.

The command keeps the real terminal for its own output, byte for byte (progress bars included): memscope
confines it to a scroll region above the footer (DECSTBM, as apt does) and redraws the footer with one write()
each time, which the tty layer never interleaves with the child's writes. Rendering is rich's.
"""

from __future__ import annotations

import io
import os
import shutil
import threading
from typing import TYPE_CHECKING, Any, Mapping, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.leak import floor_words
from ..analysis.spikes import excursion_words
from ..fmt import fmt_bytes, fmt_elapsed

if TYPE_CHECKING:
    from ..session.run import Run

FOOTER_LINES = 7
ROLE_STYLE = {
    "main": "bold cyan",
    "dataloader_worker": "green",
    "compile_worker": "magenta",
    "rank": "cyan",
    "wrapper": "dim",
    "helper": "dim",
    "other": "white",
}


LIMIT_SOURCES: dict[str | None, str] = {
    "flag": "--limit",
    "cgroup": "the container's cgroup",
    "host": "the host's memory",
}


def limit_text(limit: Mapping[str, Any] | None) -> str:
    """How every view names the limit: its size and where it came from (``summary["limit"]``, ``Run.limit()``)."""
    if not limit or not limit.get("bytes"):
        return "no limit known"
    return f"limit {fmt_bytes(limit['bytes'])} ({LIMIT_SOURCES.get(limit.get('source'), limit.get('source'))})"


OLD_RECORD = "recorded before memscope named the kind of growth"


def verdict_text(leak: dict | None, spikes: list | None = None) -> str:
    """The leak verdict in one line, as the dashboard, the terminal and the report say it: the kind of growth in
    words (``leak.growth``), what the live line said before where new evidence changed it, and for a record
    written before the kinds, its verdict as it was, saying so."""
    leak = leak or {}
    v = leak.get("verdict")
    growth = leak.get("growth")
    if isinstance(growth, dict) and growth.get("words"):
        ttl = leak.get("time_to_limit_s")
        eta = f"; at this rate the tree reaches the limit in {fmt_elapsed(ttl)}" if ttl and v == "leak" else ""
        return f"{growth['words']}{eta}{changed_text(leak)}"
    if v in ("leak", "no_leak") and "growth" not in leak:
        return f"{_old_text(leak, spikes)} ({OLD_RECORD})"
    why = leak.get("leaning") or leak.get("reason")
    return f"leak or spikes: not yet known ({why})" if why else "leak or spikes: not yet known"


def changed_text(leak: dict[str, Any]) -> str:
    """Where the live line's last answer differs from the run's: what it said, and that the whole run changed it."""
    live = leak.get("live")
    if not isinstance(live, dict) or not live.get("words"):
        return ""
    return f" (live, until {live.get('t_s', 0):.0f} s, it said: {live['words']}; the whole run's record changed it)"


def _old_text(leak: dict[str, Any], spikes: list[dict[str, Any]] | None) -> str:
    if leak.get("verdict") == "leak":
        slope = leak.get("slope_bytes_per_s") or 0
        ttl = leak.get("time_to_limit_s")
        eta = f"; at this rate the tree reaches the limit in {fmt_elapsed(ttl)}" if ttl else ""
        if leak.get("pace") == "fast" or slope >= 2**20:
            return f"memory grows steadily: the floor rises {fmt_bytes(int(slope))}/s{eta}"
        return f"slow leak: the floor rises {fmt_bytes(int(slope * 60))}/min{eta}"
    floor = floor_words(leak, fmt_bytes)
    if spikes:
        top = max(s.get("height_bytes") or 0 for s in spikes)
        return f"no leak: {floor}; {excursion_words(spikes)}, up to {fmt_bytes(top)} above it"
    return f"no leak: {floor}"


def render_lines(run: "Run", width: int, note: str = "") -> list[str]:
    """The footer as ANSI lines (pure given the run's snapshot)."""
    snap = run.snapshot
    h = snap.host
    head = Text()
    head.append(" memscope ", style="bold reverse")
    head.append(f" {fmt_elapsed(run.elapsed())}  ")
    head.append("tree PSS ", style="dim")
    head.append(fmt_bytes(snap.tree_pss), style="bold")
    head.append(f" (peak {fmt_bytes(snap.peak_pss)})  ", style="dim")
    head.append("RSS ", style="dim")
    head.append(fmt_bytes(snap.tree_rss) + "  ")
    if h is not None:
        head.append("available ", style="dim")
        head.append(f"{fmt_bytes(h.available)}/{fmt_bytes(h.total)}  ")
        head.append(limit_text(run.limit()), style="dim")
    table = Table(box=None, show_header=True, header_style="dim", pad_edge=False, padding=(0, 1), width=width)
    # Fixed widths for the figures: a long command line must not squeeze them away.
    for col, just, w in (("pid", "right", 7), ("role", "left", 17), ("RSS", "right", 10), ("PSS", "right", 10)):
        table.add_column(col, justify=just, no_wrap=True, min_width=w, max_width=w)  # type: ignore[arg-type]
    table.add_column("command", no_wrap=True, overflow="ellipsis", ratio=1)
    alive = [(pid, d) for pid, d in list(snap.procs.items()) if d.get("alive", True) and "rss" in d]
    alive.sort(key=lambda x: -x[1].get("rss", 0))
    for pid, d in alive[: FOOTER_LINES - 3]:
        role = d.get("role", "other")
        table.add_row(
            str(pid),
            Text(role, style=ROLE_STYLE.get(role, "")),
            fmt_bytes(d.get("rss")),
            fmt_bytes(d.get("pss")),
            Text((d.get("cmdline") or d.get("name") or "")[:200]),
        )  # not markup
    more = len(alive) - (FOOTER_LINES - 3)
    tail = Text(" memory: ", style="dim")
    tail.append(verdict_text(run.verdict()), style="bold")  # the run's one live verdict (session/verdict.py)
    tail.append(f"  +{more} more processes" if more > 0 else "", style="dim")
    if note:
        tail.append(f"  {note}", style="yellow")
    buf = io.StringIO()
    con = Console(
        file=buf, force_terminal=True, width=width, color_system="standard", legacy_windows=False, force_jupyter=False
    )
    con.print(head, no_wrap=True, overflow="ellipsis", crop=True)
    con.print(table)
    con.print(tail, no_wrap=True, overflow="ellipsis", crop=True)
    lines = buf.getvalue().splitlines()
    return (lines + [""] * FOOTER_LINES)[:FOOTER_LINES]


class TerminalView:
    """Pins the footer while the run goes; call ``close()`` when it ends."""

    def __init__(self, run: "Run", fd: int = 1, refresh_s: float = 0.5) -> None:
        self.run = run
        self.fd = fd
        self.refresh_s = refresh_s
        self.note = ""
        self._stop = threading.Event()
        self._size = (0, 0)
        self._thread = threading.Thread(target=self._loop, name="memscope-terminal", daemon=True)

    @staticmethod
    def wanted(fd: int = 1) -> bool:
        return os.isatty(fd) and os.environ.get("TERM", "") not in ("", "dumb")

    def start(self) -> "TerminalView":
        self._setup()
        self._thread.start()
        return self

    def _write(self, s: str) -> None:
        try:
            os.write(self.fd, s.encode("utf-8", "replace"))
        except OSError:
            self._stop.set()

    def _setup(self) -> None:
        cols, rows = shutil.get_terminal_size()
        self._size = (cols, rows)
        body = max(1, rows - FOOTER_LINES)
        # Make room, then confine scrolling to the rows above the footer; DECSTBM homes the cursor, so save it.
        self._write("\n" * FOOTER_LINES + f"\x1b[{FOOTER_LINES}A\x1b7\x1b[1;{body}r\x1b8")

    def draw(self) -> None:
        cols, rows = shutil.get_terminal_size()
        if (cols, rows) != self._size:
            self._setup()
        body = max(1, rows - FOOTER_LINES)
        out = ["\x1b7"]
        for i, line in enumerate(render_lines(self.run, cols, self.note)):
            out.append(f"\x1b[{body + 1 + i};1H\x1b[2K{line}")
        out.append("\x1b8")
        self._write("".join(out))

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.draw()
            except Exception:
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        cols, rows = shutil.get_terminal_size()
        body = max(1, rows - FOOTER_LINES)
        clear = "".join(f"\x1b[{body + 1 + i};1H\x1b[2K" for i in range(FOOTER_LINES))
        self._write(f"\x1b7\x1b[r{clear}\x1b8")


def print_final(summary: Mapping[str, Any], file: TextIO | None = None, plain: bool = False) -> None:
    """The closing lines after a run, for a terminal or a log (``plain``: no colour codes, for a notebook)."""
    import sys

    f = file or sys.stderr
    ex = summary["exit"]
    peak = summary["peak"]
    # force_jupyter=False: in a kernel rich would otherwise display() these lines into whichever cell is
    # executing when the run ends, whatever file it was given.
    con = Console(
        file=f,
        highlight=False,
        soft_wrap=True,
        force_jupyter=False,
        color_system=None if plain else "auto",  # "auto", None: rich's own defaults
        force_terminal=False if plain else None,
    )
    style = "green" if ex["cause"] == "ok" else "bold red"
    lw = summary.get("last_words")
    if lw:  # a kill or a crash: what the code was doing before it, first
        con.print(Text.assemble(("memscope: last words: ", "bold"), lw.get("text", "")))
    con.print(Text.assemble(("memscope: ", "bold"), (ex["cause"], style), f" — {ex['message']}"))
    # markup=False: a path such as rec[/x] is text, not a closing tag.
    con.print(
        f"memscope: peak tree PSS {fmt_bytes(peak['tree_pss_bytes'])}, RSS {fmt_bytes(peak['tree_rss_bytes'])}"
        f" at {peak['at_s']:.1f} s; {_count(len(summary['processes']), 'process', 'processes')}; record {summary.get('record')}",
        markup=False,
    )
    con.print(
        Text.assemble(
            ("memscope: memory: ", "bold"),
            verdict_text(summary.get("leak"), summary.get("spikes")),
            f"; {limit_text(summary.get('limit'))}",
        )
    )
    cor = summary.get("copy_on_read") or {}
    if cor.get("detected") and cor.get("text"):
        con.print(Text.assemble(("memscope: ", "bold"), cor["text"]))
    if ex.get("traceback") and ex["cause"] in ("segfault", "abort", "bus_error", "worker_crash"):
        con.print("memscope: stack at the crash:\n" + ex["traceback"].rstrip()[-4000:], markup=False)
    for w in (summary.get("warnings") or [])[:6]:
        con.print(Text.assemble(("memscope: note: ", "bold"), w))
    for a in (summary.get("advice") or [])[:4]:
        con.print(Text.assemble(("memscope: next: ", "bold"), a["text"]))


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
