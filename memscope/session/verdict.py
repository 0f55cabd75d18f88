"""The run's live verdict, one object that the dashboard, the terminal view and the Prometheus exporter all read:
fitted as the summary fits (``analysis/verdict.py`` over the record so far), and held so that it never flip-flops.

Hysteresis (``Hold``): an answer is a verdict with its kind of growth. The first is shown once the same answer has
held for FIRST_HOLD_S; after that a different answer replaces the shown one only when it has held, every refit in
a row, for a margin that grows with the run (a quarter of its time so far, more after each change): a new stair, a
new process, a trend that keeps going, never one fit. Until an answer is shown, and while a different one is
building up, the line says what it is leaning to and why ("leaning to a slow leak: +3 MiB/min, over 40 s, not yet
sure"). Each answer shown is written to the record (a "live_verdict" event), so the summary can say where the
whole run's record changed what the live line said.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..model import Limit, Record

if TYPE_CHECKING:
    from ..analysis.verdict import Inputs, Judgment


class Watched(Protocol):
    """What the live verdict reads of a run (``session.run.Run`` has it; no import of it here, no cycle)."""

    record_path: str

    def elapsed(self) -> float: ...
    def limit(self) -> Limit | None: ...
    def main_pid(self) -> int: ...
    def publish(self, rec: Record) -> None: ...


REFIT_S = 5.0  # the verdict is refitted at most this often (more where a refit costs more: REFIT_CPU_SHARE)
REFIT_CPU_SHARE = 0.05  # ... never more than this share of one core
FIRST_HOLD_S = 10.0  # the first answer holds this long (three refits in a row) before it is shown
CHANGE_SHARE = 1 / 4  # a later answer holds this share of the run's time so far (x the changes made + 1) ...
CHANGE_MIN_S = 20.0  # ... and never less than this

KIND_LEANING = {
    "leak": "a leak",
    "spikes": "only spikes",
    "step": "a one-time step",
    "flat": "a flat floor",
    "more_processes": "more processes alive, no leak",
    "copy_on_read": "copy-on-read, no leak",
}


@dataclass
class Hold:
    """The hysteresis over a stream of answers (pure: fed ``(t, answer)``, it keeps what is shown)."""

    shown: dict[str, Any] | None = None  # the answer shown: verdict, kind, words, t_s
    changes: int = 0  # changes after the first answer
    _pending: dict[str, Any] | None = None  # a different answer building up, and since when
    _since: float = 0.0
    shown_log: list[dict[str, Any]] = field(default_factory=list)

    def update(self, t: float, answer: dict[str, Any] | None) -> bool:
        """Fold in the answer of a refit at ``t`` (None: not enough data yet). True when the shown answer changed."""
        if answer is None or self._same(answer, self.shown):
            self._pending = None
            if answer is not None and self.shown is not None:
                self.shown = dict(answer, t_s=self.shown["t_s"])  # its figures move, its answer holds
            return False
        if not self._same(answer, self._pending) and not self._same_change(answer):
            self._pending, self._since = answer, t
        else:
            self._pending = dict(answer)
        if t - self._since < self.margin(t):
            return False
        if self.shown is not None:
            self.changes += 1
        self.shown, self._pending = dict(answer, t_s=t), None
        self.shown_log.append(self.shown)
        return True

    def margin(self, t: float) -> float:
        """How long a different answer must hold, every refit in a row, before it is shown."""
        if self.shown is None:
            return FIRST_HOLD_S
        return max(CHANGE_MIN_S, CHANGE_SHARE * t * (1 + self.changes))

    def leaning(self, t: float) -> str | None:
        """What a different answer building up says, and how long it has held ("leaning to ...")."""
        p = self._pending
        if p is None:
            return None
        lean = KIND_LEANING.get(str(p.get("kind")), str(p.get("kind")))
        if p.get("kind") == "leak" and "Slow" in str(p.get("words")):
            lean = "a slow leak"
        detail = str(p.get("words") or "").split(": ", 1)[-1]
        return f"leaning to {lean}: {detail}, over {t - self._since:.0f} s, not yet sure"

    def _same_change(self, answer: dict[str, Any]) -> bool:
        """A new verdict building up whose kind changed on the way (no leak: "flat", then "stepped up" as the
        floor's new level held): the same change, timed from its start; only its kind moves."""
        p, shown = self._pending, self.shown
        return (
            p is not None
            and shown is not None
            and p["verdict"] == answer["verdict"]
            and answer["verdict"] != shown["verdict"]
        )

    @staticmethod
    def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
        return a is not None and b is not None and (a["verdict"], a["kind"]) == (b["verdict"], b["kind"])


def answer(j: "Judgment") -> dict[str, Any] | None:
    """A judgment as an answer the hold weighs: None while its verdict is insufficient_data."""
    if j.verdict.verdict == "insufficient_data" or j.growth is None or j.provisional:
        return None
    return {
        "verdict": j.verdict.verdict,
        "kind": j.growth.kind,
        "words": j.growth.words(),
        "leak": dict(j.verdict.to_dict(), growth=j.growth.to_dict()),
    }


def view(hold: Hold, t: float, last: "Judgment | None") -> dict[str, Any]:
    """The leak dict the views read (``terminal.verdict_text``): the shown answer's, else the last fit's
    insufficient verdict, with what it is leaning to."""
    lean = hold.leaning(t)
    if hold.shown is not None:
        out = dict(hold.shown["leak"])
    else:  # nothing shown yet: not known, whatever a single fit said
        out = {"verdict": "insufficient_data", "growth": None}
        if last is not None and last.verdict.verdict == "insufficient_data":
            out["reason"] = last.verdict.reason
        elif last is not None and last.provisional:
            out["reason"] = last.provisional
    if lean:
        out["leaning"] = lean
    out["changes"] = hold.changes
    return out


class LiveVerdict:
    """The run's live verdict: ``current()`` refits from the record when REFIT_S has passed, on the caller's
    thread (one refit at a time; the others get the last answer at once)."""

    def __init__(self, run: Watched, clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.hold = Hold()
        self._clock = clock
        self._lock = threading.Lock()
        self._at = -math.inf
        self._every = REFIT_S
        self._last: Judgment | None = None
        self._view: dict[str, Any] = {"verdict": "insufficient_data", "growth": None}
        self.copy_on_read: dict[str, Any] | None = None  # the last refit's copy-on-read finding (its section)

    def current(self) -> dict[str, Any]:
        """The live verdict as the views show it (refitted first when due)."""
        now = self._clock()
        if now - self._at >= self._every and self._lock.acquire(blocking=False):
            try:
                self._at = now
                c0 = time.thread_time()
                self._refit()
                self._every = max(REFIT_S, (time.thread_time() - c0) / REFIT_CPU_SHARE)
            except Exception:  # a record being written can be read half-way: the last answer stands
                pass
            finally:
                self._lock.release()
        return self._view

    def _refit(self) -> None:
        from ..analysis.verdict import judge  # loaded while the run goes (finish.load_analyses)

        inp = self._inputs()
        if inp is None:
            return
        t = self.run.elapsed()
        if inp.copy_on_read is not None:
            self.copy_on_read = dict(inp.copy_on_read)
        j = judge(inp)
        self._last = j
        if self.hold.update(t, answer(j)) and self.hold.shown is not None:
            from ..model import Event

            shown = self.hold.shown
            data = {"verdict": shown["verdict"], "kind": shown["kind"], "words": shown["words"]}
            self.run.publish(Event(t, None, "live_verdict", data))
        self._view = view(self.hold, t, j)

    def _inputs(self) -> "Inputs | None":
        from ..analysis.verdict import read_inputs
        from ..record.reader import RunData

        run = self.run
        if not run.record_path:
            return None
        lim = run.limit()
        rd = RunData(run.record_path)
        try:
            return read_inputs(rd, run.main_pid(), run.elapsed(), lim["bytes"] if lim else None, live=True)
        finally:
            rd.close()


def replay(record: str, step_s: float = REFIT_S, cor: bool = True) -> list[tuple[float, dict[str, Any]]]:
    """The live line a run showed, replayed from its record: the verdict refitted every ``step_s`` on the record
    as it was then, through the same hold. [(t, the view's leak dict)] (the benchmark's live changes, the tests')."""
    from ..analysis.supervision import main_pid
    from ..analysis.verdict import assess_copy_on_read, judge, read_inputs
    from ..record.reader import RunData

    rd = RunData(record)
    try:
        end = rd.last_sample_t() or 0.0
        inp = read_inputs(rd, main_pid(rd.processes(), rd.run_row()["root_pid"]), end)
        hold, out, t = Hold(), [], step_s
        while t <= end:
            j = judge(inp.upto(t), copy_on_read=assess_copy_on_read(rd, t) if cor else None)
            hold.update(t, answer(j))
            out.append((t, view(hold, t, j)))
            t += step_s
    finally:
        rd.close()
    return out
