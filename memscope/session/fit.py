"""The "will it fit?" probes: each size run as a real, recorded memscope run, stopped early, then the forecast.

``{}`` in the command is replaced by the size. A probe runs until it ends by itself or, with ``for_s``, for that
many seconds of training (from its first DataLoader epoch or train/eval switch, else from its start). Without
``for_s`` (the default), until one evaluation is over, training has run ``AFTER_EVAL_S`` past it and
``MIN_TRAIN_S`` in all, or ``TRAIN_S`` seconds of training, whichever comes first (see ``Probe.due``). A probe that dies of memory (the OOM
killer, a CUDA OOM, the tree over ``limit_bytes``) is a size that does not fit: the larger ones are skipped. The
model itself is ``analysis/fit.py``; this module only runs and measures.

The probes run with glibc's mmap threshold fixed (``MALLOC_MMAP_THRESHOLD_`` in their environment): its dynamic
threshold makes the peak an erratic curve in the size, a fixed one a line (``analysis/fit.py`` says why). Then one
more probe, the anchor, runs at the largest size with the environment as the program has it, to measure what its
allocator keeps. Where the environment already sets a ``MALLOC_*`` variable or glibc's malloc tunables, the probes
run with it as it is and there is no anchor.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import LaunchError
from ..model import Event, Record, TreeSample
from ..record.reader import RunData
from .options import Options
from .run import Run

if TYPE_CHECKING:
    from ..analysis.fit import Point

PLACEHOLDER = "{}"
# The default probe length (benchmarks/fit_accuracy.py measured where the three workloads' peaks were reached:
# within the first optimizer steps after the model and loader were built; BENCHMARKS.md "fit").
AFTER_EVAL_S = 2.0  # training resumed after one evaluation, this long: its first steps after eval are seen
MIN_TRAIN_S = 10.0  # of training at least, evaluation or not: the peak of a run with workers kept rising
TRAIN_S = 20.0  # of training (first epoch or train/eval switch) when no evaluation came
NO_PHASES_S = 30.0  # since the start, for a command memscope sees no training phases in
GRACE_S = 3.0  # a probe is stopped as Ctrl-C would, SIGKILL this long after
# A probe's RSS rounds (the fast series its peak is read from): 4 times the default rate. A step's peak lasts
# tens of milliseconds; a probe runs a few dozen steps, and at 0.2 s the sampled maximum of a short probe fell
# short of the step's real peak by a different amount at each size. 20 statm reads a second cost well under 1 %
# of a core for a few processes (BENCHMARKS.md, "Sampler cost").
PROBE_INTERVAL_S = 0.05
# The probes' fixed mmap threshold: 128 KiB, glibc's own starting value, so every tensor of a size that matters is
# mmapped and given back when freed, as the large ones are by the dynamic threshold (benchmarks/fit_accuracy.py).
MMAP_THRESHOLD = 128 * 1024
FAILED = ("exception", "segfault", "abort", "bus_error", "killed", "worker_crash", "unknown")


def parse_sizes(text: str) -> list[int]:
    """``8,16,32``: at least two different positive whole numbers, sorted (LaunchError: one line)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise LaunchError(f"--sizes takes whole numbers separated by commas (8,16,32), not {text!r}") from None
    return check_sizes(sizes)


def check_sizes(sizes: Sequence[int]) -> list[int]:
    """At least two different positive whole numbers, sorted (LaunchError otherwise)."""
    if any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes):
        raise LaunchError(f"sizes must be positive whole numbers, not {list(sizes)!r}")
    out = sorted(set(sizes))
    if len(out) < 2:
        raise LaunchError("a line needs at least two different sizes (--sizes 8,16,32)")
    return out


def with_size(command: Sequence[str], size: int) -> list[str]:
    """The command with every ``{}`` replaced by ``size``."""
    return [a.replace(PLACEHOLDER, str(size)) for a in command]


def allocator_env(env: dict[str, str] | None) -> tuple[dict[str, str] | None, str | None]:
    """The probes' environment (``env``, None: this process's, with the fixed mmap threshold added) and, where
    ``env`` already sets glibc's malloc (a ``MALLOC_*`` variable, ``glibc.malloc`` tunables), None and why."""
    base = dict(os.environ if env is None else env)
    own = sorted(k for k in base if k.startswith("MALLOC_"))
    if "glibc.malloc." in base.get("GLIBC_TUNABLES", ""):
        own.append("GLIBC_TUNABLES")
    if own:
        return None, f"the environment sets {', '.join(own)}: the probes ran with it as it is"
    base["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    return base, None


def check_command(command: Sequence[str]) -> list[str]:
    """A command with ``{}`` where the size goes (LaunchError otherwise)."""
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LaunchError("no command given: memscope fit --sizes 8,16,32 -- python train.py --batch-size {}")
    if not any(PLACEHOLDER in a for a in argv):
        raise LaunchError("the command has no {} where the size goes (python train.py --batch-size {})")
    return argv


@dataclass
class Probe:
    """One size's run and when to stop it."""

    size: int
    run: Run
    for_s: float | None
    limit_bytes: int | None
    train_t: float | None = None  # the first epoch or train/eval switch
    eval_seen: bool = False
    resumed_t: float | None = None  # training resumed after the first evaluation
    crossed: bool = False  # the tree went over limit_bytes
    stop_reason: str | None = None

    def see(self, rec: Record) -> None:
        """Follow the phases and the tree's total (a subscriber of the probe's run)."""
        if isinstance(rec, Event) and rec.kind in ("phase", "epoch"):
            if self.train_t is None:
                self.train_t = rec.t
            name, state = (rec.data or {}).get("name"), (rec.data or {}).get("state")
            if rec.kind == "phase" and state == "switch":
                if name == "eval":
                    self.eval_seen = True
                elif name == "train" and self.eval_seen and self.resumed_t is None:
                    self.resumed_t = rec.t
            elif rec.kind == "phase" and name == "eval" and state == "stop" and self.eval_seen:
                self.resumed_t = self.resumed_t or rec.t  # the eval loader ended: training goes on
        elif isinstance(rec, TreeSample) and self.limit_bytes:
            total = rec.est_total if rec.procs else None
            if total is not None and total > self.limit_bytes:
                self.crossed = True

    def due(self, now: float) -> str | None:
        """Why the probe has run long enough now, or None."""
        if self.crossed:
            return "over the limit"
        if self.for_s is not None:
            start = self.train_t if self.train_t is not None else 0.0
            return f"{self.for_s:g} s of training" if now - start >= self.for_s else None
        trained = now - self.train_t if self.train_t is not None else 0.0
        if self.resumed_t is not None and now - self.resumed_t >= AFTER_EVAL_S and trained >= MIN_TRAIN_S:
            return "one evaluation and the training after it"
        if self.train_t is not None and now - self.train_t >= TRAIN_S:
            return f"{TRAIN_S:g} s of training"
        if self.train_t is None and now >= NO_PHASES_S:
            return f"{NO_PHASES_S:g} s (no training phases seen)"
        return None


class Fit:
    """Probes at each size, one after the other, then the forecast (``result``, the --json object).

    ``subscribe(fn)``: ``fn(kind, data)`` for "probe_started" ({size, run}), "sample" ({size, t, bytes}),
    "probe_done" ({point}), "result" ({result}), on the probes' thread. ``start()`` runs them in the background
    (a notebook), ``run()`` in the caller's thread (the CLI)."""

    def __init__(
        self,
        command: Sequence[str],
        sizes: Sequence[int],
        *,
        target: int | None = None,
        limit_bytes: int | None = None,
        margin: float = 0.1,
        for_s: float | None = None,
        record_dir: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        output: str = "capture",
        interval_s: float = PROBE_INTERVAL_S,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.command = check_command(command)
        self.sizes = check_sizes(sizes)
        if target is not None and (isinstance(target, bool) or not isinstance(target, int) or target <= 0):
            raise LaunchError(f"the target must be a positive whole number, not {target!r}")
        self.target = target if target is not None else 2 * self.sizes[-1]
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise LaunchError(f"the margin must be a share from 0 to below 1 (0.1 or 10%), not {margin!r}")
        if for_s is not None and (isinstance(for_s, bool) or not isinstance(for_s, (int, float)) or not 0 < for_s):
            raise LaunchError(f"--for must be a number of seconds above 0, not {for_s!r}")
        self.limit_bytes, self.margin, self.for_s = limit_bytes, float(margin), for_s
        self.options: dict[str, Any] = dict(
            record_dir=record_dir, cwd=cwd, env=env, output=output, interval_s=interval_s, limit_bytes=limit_bytes
        )
        Options(**self.options)  # the options' own checks (through Run) come with the first probe; types here
        self._fixed_env, why = allocator_env(env)
        self.allocator: dict[str, Any] = (
            {"mmap_threshold": MMAP_THRESHOLD}
            if self._fixed_env is not None
            else {"mmap_threshold": None, "reason": why}
        )
        self.say = say or (lambda line: None)
        self.points: list[Point] = []
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.current: Probe | None = None
        self._subs: list[Callable[[str, dict[str, Any]], None]] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public ---------------------------------------------------------------------------------------------------
    def subscribe(self, fn: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``fn(kind, data)`` for each step of the fit; returns an unsubscribe function."""
        with self._lock:
            self._subs.append(fn)
        return lambda: self._subs.remove(fn) if fn in self._subs else None

    def start(self) -> "Fit":
        """Run the probes on a thread of their own; returns at once."""
        self._thread = threading.Thread(target=self._guarded, name="memscope-fit", daemon=True)
        self._thread.start()
        return self

    def run(self) -> dict[str, Any]:
        """Run the probes here and return the forecast (LaunchError: a probe failed for another reason)."""
        self._guarded()
        if self.error is not None:
            raise LaunchError(self.error)
        assert self.result is not None
        return self.result

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The forecast once the probes are done (None on timeout, or when the fit failed: ``error`` says why)."""
        self._done.wait(timeout)
        return self.result

    @property
    def done(self) -> bool:
        """Whether the fit has finished (with a result or an error)."""
        return self._done.is_set()

    def stop(self) -> None:
        """Stop the probe going and run no more (the forecast is made from the probes that finished)."""
        self._stopped.set()
        probe = self.current
        if probe is not None and not probe.run.ended:
            probe.run.stop(grace_s=GRACE_S, wait=False)

    def __repr__(self) -> str:
        r = self.result
        if r is not None:
            return (
                f"<memscope.Fit target {self.target}: {'fits' if r['fits'] else 'does not fit'}, "
                f"forecast {r['predicted_peak_bytes']} bytes, largest fitting {r['largest_fitting_size']}>"
            )
        total = len(self.sizes) + (self._fixed_env is not None)
        state = f"error: {self.error}" if self.error else f"{len(self.points)} of {total} probes done"
        return f"<memscope.Fit target {self.target}: {state}>"

    # -- the probes ------------------------------------------------------------------------------------------------
    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        for fn in list(self._subs):
            try:
                fn(kind, data)
            except Exception:
                pass  # a view's trouble never stops the probes

    def _guarded(self) -> None:
        try:
            self._probe_all()
        except LaunchError as exc:
            self.error = str(exc)
        except Exception as exc:  # a bug must not leave a notebook waiting forever
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._done.set()
            self._emit("done", {"result": self.result, "error": self.error})

    def _probe_all(self) -> None:
        from ..analysis import fit as model

        # The sizes with the fixed threshold, then the anchor: the largest size with the program's own settings.
        plan = [(size, False) for size in self.sizes]
        if self._fixed_env is not None:
            plan.append((self.sizes[-1], True))
        for i, (size, is_anchor) in enumerate(plan):
            if self._stopped.is_set():
                break
            point = self._probe(size, is_anchor)
            if point is None:  # stopped by the person half-way: its peak is no size's peak
                break
            self.points.append(point)
            self._emit("probe_done", {"point": point})
            if point.died is not None:  # the larger sizes are skipped; the anchor too (its size did not fit)
                for later, _ in [step for step in plan[i + 1 :] if not step[1]]:
                    skipped = model.Point(later, died="skipped")
                    self.points.append(skipped)
                    self._emit("probe_done", {"point": skipped})
                break
        limit = self.limit_bytes or _least(p.limit_bytes for p in self.points)
        gpu_limit = _least(p.gpu_total_bytes for p in self.points)
        self.result = model.forecast(self.points, self.target, limit, self.margin, gpu_limit, self.allocator)
        if self._stopped.is_set():
            self.result["notes"].append("stopped before every probe ran: the forecast is from the probes that did")
        self._emit("result", {"result": self.result})

    def _probe(self, size: int, is_anchor: bool = False) -> "Point | None":
        from ..analysis import fit as model

        env = self.options["env"] if is_anchor or self._fixed_env is None else self._fixed_env
        run = Run(with_size(self.command, size), options=Options(**{**self.options, "env": env}), say=self.say)
        probe = Probe(size, run, self.for_s, self.limit_bytes)
        self.current = probe
        last = [0.0]

        def see(rec: Record) -> None:
            probe.see(rec)
            if isinstance(rec, TreeSample) and rec.kind == "rss" and rec.procs and rec.t - last[0] >= 0.2:
                last[0] = rec.t
                self._emit("sample", {"size": size, "t": rec.t, "bytes": rec.est_total, "anchor": is_anchor})

        run.subscribe(see)
        run.start()
        self._emit("probe_started", {"size": size, "run": run, "anchor": is_anchor})
        while not run.ended:
            if self._stopped.is_set():
                run.stop(grace_s=GRACE_S, wait=False)
                break
            reason = probe.due(run.elapsed())
            if reason:
                probe.stop_reason = reason
                run.stop(grace_s=GRACE_S, wait=False)
                break
            run.wait(0.1)
        summary = run.wait() or {}
        self.current = None
        try:
            rd = RunData(run.record_path)
            try:
                roles, split = model.role_peaks(rd), model.private_split(rd)
            finally:
                rd.close()
        except Exception:
            roles, split = {}, None
        point = model.Point(
            size,
            model.peaks_of(summary, roles, split),
            died=model.death(summary, probe.crossed),
            record=run.record_path,
            gpu_total_bytes=model.gpu_total(summary),
            limit_bytes=summary.get("limit_bytes"),
            anchor=is_anchor,
        )
        ex = summary.get("exit")
        cause = ex.get("cause") if ex else None
        if self._stopped.is_set() and probe.stop_reason is None and point.died is None and cause != "ok":
            return None
        if point.died is None and probe.stop_reason is None and not self._stopped.is_set() and cause in FAILED:
            message = " ".join(str((ex.get("message") if ex else None) or cause).split())[:300]
            raise LaunchError(f"the probe at size {size} failed ({cause}): {message} (record {run.record_path})")
        return point


def _least(values: Any) -> int | None:
    vals = [int(v) for v in values if v]
    return min(vals) if vals else None
