"""The "will it fit?" model: peak memory as a line in the batch size, fitted on short probes, and its forecast.

Pure: the probes' peaks in, the model out. Each series (the tree's PSS, each role, each phase, the GPU's reserved
and NVML peaks) gets its own least-squares line ``peak = intercept + slope x size`` and its residual; a line whose
points curve away from it by more than the noise says so (``on_line`` False), and the forecast then extrapolates
the last two probes' slope when that is the steeper one (the safe side). The limit check is ``limit x (1 - margin)``.

The allocator's part: glibc raises its mmap threshold (up to 32 MiB) each time a mmapped block is freed, so a
tensor under it comes from the heap and stays resident once freed, a bigger one goes back to the system at once.
The peak is then live memory plus a retention that moves erratically with the size (measured on a Transformer
LM's max RSS at batch 4..48: slopes of 24, 23, 6, 14.5, 16 MiB a sample). With a fixed threshold
(``MALLOC_MMAP_THRESHOLD_``, set by ``session/fit.py`` in the probes' environment) the peaks are a line (12 MiB a
sample). One more probe at the largest size with the program's own settings (the ``anchor``) measures the
retention there; the tree's forecast is the anchor's peak carried on by the fixed line's slope:
``anchor + slope x (target - largest)``, i.e. the line plus the retention measured at the largest probe.

That retention need not hold at the target: where a program's tensors all stay under the 32 MiB cap, it grows with
the size (a ResNet's max RSS above the fixed line: 31, 57, 102, 172 MiB at 16, 32, 64, 128), and where they cross
it, it falls (an LM's logits at 31 MiB, then 62). The probes cannot tell which, so the answer also carries the
forecast with the retention grown in proportion to the size (``predicted_peak_high_bytes``), and says so where the
limit falls between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..fmt import fmt_bytes

MiB = 1 << 20
# "Not on a line": the largest residual is more than all of these. Measured noise of one probe's PSS peak on the
# shared 2-core VM was 1-6 MiB on workloads of 0.3-1.5 GiB (benchmarks/fit_accuracy.py, BENCHMARKS.md).
CURVE_SHARE_OF_RISE = 0.10  # of the rise between the smallest and largest probe
CURVE_SHARE_OF_PEAK = 0.02  # of the peak at that point
CURVE_FLOOR_BYTES = 8 * MiB
HOST_SERIES = "tree"  # the series the host (container) limit applies to
# The tree's peak split in two: its private memory (anonymous PSS + swap, what the training allocates) and the
# file-backed part of its PSS at the peak (the libraries' pages). The file-backed part does not grow with the size,
# but its PSS share moves with how many other processes on the machine map the same libraries (libpython, libc):
# measured 45-74 MiB at the peaks of three identical runs on the shared VM, the private peak 369-398 MiB. The
# forecast lines up the private peaks and adds the file-backed part's median, so that this noise is not
# extrapolated.
PRIVATE_SERIES, FILE_SERIES = "tree_private", "tree_file"
GPU_SERIES = ("gpu_reserved", "gpu_nvml")
ROLE_PREFIX, PHASE_PREFIX = "role:", "phase:"
# The ways a probe dies of memory: a probe that ends this way is a size that does not fit.
DEATHS = {
    "oom_kill": "was killed by the out-of-memory killer",
    "cuda_oom": "ran out of CUDA memory",
    "limit": "went over the limit",
}


@dataclass
class Point:
    """One probe: its size, its peaks per series (bytes), and whether it ran (``died``: None, or a DEATHS key)."""

    size: int
    peaks: dict[str, int] = field(default_factory=dict)
    died: str | None = None
    record: str | None = None
    gpu_total_bytes: int | None = None  # the device's total memory, where the probe used a GPU
    limit_bytes: int | None = None  # the effective host limit the probe's summary names (cgroup or host)
    anchor: bool = False  # run with the program's own allocator settings (the others: a fixed mmap threshold)


@dataclass
class Line:
    """``peak = intercept + slope x size`` fitted on ``len(sizes)`` probes; residual: their RMS distance (bytes)."""

    intercept: float
    slope: float
    residual: float
    max_residual: float
    on_line: bool | None  # None: two points, a line through both says nothing about a curve
    sizes: list[int]
    peaks: list[int]

    def at(self, size: float) -> float:
        """The line's peak at ``size``."""
        return self.intercept + self.slope * size

    def to_dict(self) -> dict[str, Any]:
        """The --json form: intercept and residual in bytes, slope in bytes per unit of size."""
        return {
            "intercept": round(self.intercept),
            "slope": round(self.slope, 1),
            "residual": round(self.residual),
            "on_line": self.on_line,
        }


def fit_line(sizes: Sequence[float], peaks: Sequence[float]) -> Line:
    """The least-squares line through (size, peak); ValueError with fewer than two distinct sizes.

    Unweighted: weighting the larger probes more (size squared, tried first) was farther from the real runs on the
    same probes in benchmarks/fit_accuracy.py (mean absolute error 11.0 % against 9.2 % over 8 runs, BENCHMARKS.md)."""
    n = len(sizes)
    if n != len(peaks) or len(set(sizes)) < 2:
        raise ValueError("a line needs at least two different sizes")
    mx, my = sum(sizes) / n, sum(peaks) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    slope = sum((x - mx) * (y - my) for x, y in zip(sizes, peaks)) / sxx
    intercept = my - slope * mx
    res = [y - (intercept + slope * x) for x, y in zip(sizes, peaks)]
    rms = math.sqrt(sum(r * r for r in res) / n)
    worst = max(range(n), key=lambda i: abs(res[i]))
    on_line: bool | None = None
    if n >= 3:
        rise = abs(slope * (max(sizes) - min(sizes)))
        allowed = max(CURVE_SHARE_OF_RISE * rise, CURVE_SHARE_OF_PEAK * abs(peaks[worst]), CURVE_FLOOR_BYTES)
        on_line = abs(res[worst]) <= allowed
    return Line(intercept, slope, rms, abs(res[worst]), on_line, [int(s) for s in sizes], [int(p) for p in peaks])


def fit_all(points: Sequence[Point]) -> dict[str, Line]:
    """A line per series, over the probes that ran and measured it (a series seen at fewer than two sizes: none);
    the anchor is no point of the lines (its allocator is another)."""
    alive = [p for p in points if p.died is None and not p.anchor]
    names = sorted({k for p in alive for k in p.peaks})
    out: dict[str, Line] = {}
    for name in names:
        pts = sorted((p.size, p.peaks[name]) for p in alive if p.peaks.get(name) is not None)
        if len({s for s, _ in pts}) >= 2:
            out[name] = fit_line([s for s, _ in pts], [y for _, y in pts])
    return out


def host_line(points: Sequence[Point], lines: Mapping[str, Line] | None = None) -> tuple[Line | None, float]:
    """The line the tree's forecast is read from, and what to add to it: the private peaks' line plus the median
    file-backed part where every probe that ran measured both, else the tree's PSS line plus 0."""
    line, offset, _ = _host(points, fit_all(points) if lines is None else lines)
    return line, offset


def _host(points: Sequence[Point], lines: Mapping[str, Line]) -> tuple[Line | None, float, str]:
    alive = [p for p in points if p.died is None and not p.anchor]
    files = sorted(p.peaks[FILE_SERIES] for p in alive if p.peaks.get(FILE_SERIES) is not None)
    if PRIVATE_SERIES in lines and len(files) == len(alive):
        return lines[PRIVATE_SERIES], float(files[len(files) // 2]), PRIVATE_SERIES
    return lines.get(HOST_SERIES), 0.0, HOST_SERIES


def anchor(points: Sequence[Point]) -> Point | None:
    """The probe run with the program's own allocator settings (the last one, where there are several)."""
    found = [p for p in points if p.anchor]
    return found[-1] if found else None


def retention(points: Sequence[Point], lines: Mapping[str, Line] | None = None) -> float | None:
    """What the program's own allocator keeps above the fixed-threshold line at the anchor's size (bytes, in the
    series the tree's forecast is read from); None without an anchor that ran and measured that series."""
    lines = fit_all(points) if lines is None else lines
    line, _, series = _host(points, lines)
    a = anchor(points)
    if line is None or a is None or a.died is not None or a.peaks.get(series) is None:
        return None
    # An anchor below the line is the probes' noise (-11 MiB seen once), never memory given back: it adds nothing.
    return max(0.0, a.peaks[series] - line.at(a.size))


def _grown(kept: float | None, a: Point | None, target: int) -> float:
    """What the retention adds between the anchor's size and ``target`` if it grows in proportion to the size (0
    without a retention, or at a target no larger than the anchor)."""
    if not kept or a is None or a.size <= 0 or target <= a.size:
        return 0.0
    return kept * (target - a.size) / a.size


def high_words(result: Mapping[str, Any]) -> str | None:
    """The answer's high side in words, where it is above the forecast (the table's line, the notebook's clause)."""
    pred, high = result.get("predicted_peak_bytes"), result.get("predicted_peak_high_bytes")
    if pred is None or high is None or high <= pred:
        return None
    return f"up to {fmt_bytes(high)} if what the allocator keeps grows in proportion to the size"


def predict(line: Line, size: float) -> tuple[float, str]:
    """The forecast at ``size`` and how it was made: the fitted line, or, where the probes curve upward away
    from it, the slope of the two largest probes carried on from the largest (whichever is higher)."""
    base = line.at(size)
    if line.on_line is False and len(line.sizes) >= 2 and size > line.sizes[-1]:
        (x1, y1), (x2, y2) = list(zip(line.sizes, line.peaks))[-2:]
        steep = y2 + (y2 - y1) / (x2 - x1) * (size - x2)
        if steep > base:
            return steep, "two_largest"
    return base, "line"


def largest_fitting(line: Line, budget: float) -> int | None:
    """The largest whole size whose forecast stays within ``budget`` bytes; None where the line does not grow."""
    if line.slope <= 0:
        return None if line.intercept <= budget else 0
    best = max(0, math.floor((budget - line.intercept) / line.slope))
    if line.on_line is False:  # the steeper forecast decides beyond the largest probe
        while best > line.sizes[-1] and predict(line, best)[0] > budget:
            best = max(line.sizes[-1], math.floor(best * 0.98))
    return best


def forecast(
    points: Sequence[Point],
    target: int,
    limit_bytes: int | None,
    margin: float,
    gpu_limit_bytes: int | None = None,
    allocator: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole answer (the --json object): the probes, the model per series, the forecast at ``target`` against
    ``limit x (1 - margin)``, the largest size that fits, and the words that go with them (``notes``).

    ``allocator``: how the probes ran (``mmap_threshold``: the fixed threshold in bytes, or None with ``reason``),
    given back as ``allocator`` with the anchor's size, peak and retention added; the tree's forecast and the
    largest fitting size add the retention where an anchor ran."""
    lines = fit_all(points)
    died = sorted((p for p in points if p.died), key=lambda p: p.size)
    first_dead = died[0].size if died else None
    notes: list[str] = []
    budget = limit_bytes * (1 - margin) if limit_bytes else None
    gpu_budget = gpu_limit_bytes * (1 - margin) if gpu_limit_bytes else None
    predicted: int | None = None
    method = "line"
    host, offset = host_line(points, lines)
    kept = retention(points, lines)
    extra = kept or 0.0
    a = anchor(points)
    high: int | None = None
    if host is not None:
        value, method = predict(host, target)
        predicted = max(0, round(value + offset + extra))
        high = predicted + round(_grown(kept, a, target))
        if host.on_line is False:
            notes.append(
                f"the probes are not on a line (largest distance {fmt_bytes(host.max_residual)}): "
                + (
                    "the forecast carries on the slope of the two largest probes, the higher of the two; "
                    if method == "two_largest"
                    else ""
                )
                + "add a probe nearer the target to make sure"
            )
        elif host.on_line is None:
            notes.append("two probes: a line through both cannot show a curve; a third size would check it")
    elif not died:
        notes.append("fewer than two probes measured the tree's peak: no line")
    gpu_pred: dict[str, int] = {}
    for name in GPU_SERIES:
        if name in lines:
            gpu_pred[name] = max(0, round(predict(lines[name], target)[0]))
    # Fits: every forecast within its budget, and the target below the first size that died.
    checks: list[bool] = []
    if predicted is not None and budget is not None:
        checks.append(predicted <= budget)
    if gpu_pred and gpu_budget is not None:
        checks.append(max(gpu_pred.values()) <= gpu_budget)
    if first_dead is not None:
        checks.append(target < first_dead)
        notes.append(
            f"the probe at size {first_dead}"
            + (" with the program's own allocator settings" if died[0].anchor else "")
            + f" {DEATHS.get(died[0].died or '', died[0].died)}: it does not fit"
            + (", and the larger ones were skipped" if any(p.size > first_dead for p in died[1:]) else "")
        )
    if a is not None and a.died is not None and predicted is not None:
        notes.append(
            "no probe with the program's own allocator settings ran to its end: the forecast is the fixed "
            "threshold's line alone, without what the allocator keeps (a floor)"
        )
    if allocator and allocator.get("reason"):
        notes.append(f"{allocator['reason']}; the forecast is their line")
    if predicted is not None and high is not None and budget is not None and predicted <= budget < high:
        notes.append(
            f"it fits by the forecast, but not if what the allocator keeps grows with the size (up to "
            f"{fmt_bytes(high)} at size {target}; it does where the program's tensors stay under glibc's 32 MiB "
            "threshold): probe nearer the target, or keep a larger margin"
        )
    fits = bool(checks) and all(checks)
    if not checks:
        notes.append("no limit and no forecast to compare: cannot say whether it fits")
    sizes: list[int] = []
    if host is not None and budget is not None:
        s = largest_fitting(host, budget - offset - extra)
        if s is not None:
            sizes.append(s)
    for name in GPU_SERIES:
        if name in lines and gpu_budget is not None:
            s = largest_fitting(lines[name], gpu_budget)
            if s is not None:
                sizes.append(s)
    if first_dead is not None:
        sizes.append(first_dead - 1)
    largest = min(sizes) if sizes else None
    return {
        "target": target,
        "predicted_peak_bytes": predicted,
        "predicted_peak_high_bytes": high,
        "fits": fits,
        "largest_fitting_size": largest,
        "limit_bytes": limit_bytes,
        "margin": margin,
        "runs": [
            {
                "size": p.size,
                "peak_bytes": p.peaks.get(HOST_SERIES),
                "record": p.record,
                "died": p.died,
                "anchor": p.anchor,
                **({"gpu_peak_bytes": _gpu_peak(p)} if _gpu_peak(p) is not None else {}),
            }
            for p in sorted(points, key=lambda p: (p.size, p.anchor))
        ],
        "model": {name: line.to_dict() for name, line in lines.items()},
        "method": method,
        "gpu": (
            {"limit_bytes": gpu_limit_bytes, "predicted_peak_bytes": gpu_pred} if gpu_pred or gpu_limit_bytes else None
        ),
        "allocator": _allocator(allocator, a, kept),
        "notes": notes,
    }


def _allocator(given: Mapping[str, Any] | None, a: Point | None, kept: float | None) -> dict[str, Any] | None:
    """The --json ``allocator`` object: how the probes ran, and the anchor's size, peak and retention."""
    if given is None and a is None:
        return None
    out: dict[str, Any] = {"mmap_threshold": None, **(given or {})}
    if a is not None:
        out.update(
            anchor_size=a.size,
            anchor_peak_bytes=a.peaks.get(HOST_SERIES),
            anchor_died=a.died,
            retention_bytes=round(kept) if kept is not None else None,
        )
    return out


def _gpu_peak(p: Point) -> int | None:
    vals = [p.peaks[k] for k in GPU_SERIES if p.peaks.get(k) is not None]
    return max(vals) if vals else None


# -- a probe's peaks from its summary (and the reader's role series) ------------------------------------------------
def peaks_of(
    summary: Mapping[str, Any], role_peaks: Mapping[str, int] | None = None, split: tuple[int, int] | None = None
) -> dict[str, int]:
    """A probe's peaks by series: ``tree`` (the summary's peak: the tree's PSS at the fast rate), ``role:<role>``
    (``role_peaks``: each role's PSS summed over its processes, at its highest round), ``tree_private`` and
    ``tree_file`` (``split``: ``private_split``), ``phase:train`` and
    ``phase:eval`` (the tree's peak inside each, where memscope saw phases), and on a GPU ``gpu_reserved`` (PyTorch's
    reserved peak, summed over the tree's processes and devices) and ``gpu_nvml`` (NVML's peak for the tree)."""
    out: dict[str, int] = {}
    peak = (summary.get("peak") or {}).get("tree_pss_bytes") or (summary.get("peak") or {}).get("tree_rss_bytes")
    if peak:
        out[HOST_SERIES] = int(peak)
    if split is not None and split[0]:
        out[PRIVATE_SERIES], out[FILE_SERIES] = int(split[0]), int(split[1])
    for role, v in (role_peaks or {}).items():
        if v:
            out[ROLE_PREFIX + role] = int(v)
    for ph in summary.get("phases") or []:
        name = ph.get("name")
        if name in ("train", "eval") and ph.get("peak_bytes") is not None:
            key = PHASE_PREFIX + name
            out[key] = max(out.get(key, 0), int(ph["peak_bytes"]))
    alloc = summary.get("allocator") or {}
    reserved = sum(int(d.get("peak_reserved_bytes") or 0) for d in alloc.get("devices") or [])
    if reserved:
        out["gpu_reserved"] = reserved
    gpu = summary.get("gpu") or {}
    if gpu.get("tree_peak_bytes"):
        out["gpu_nvml"] = int(gpu["tree_peak_bytes"])
    return out


def role_peaks(rd: Any) -> dict[str, int]:
    """Each role's peak: the highest round of its processes' PSS summed (``record.reader.RunData``, fast series)."""
    return {role: int(max(ys)) for role, (_, ys) in rd.role_fast_totals().items() if ys}


def private_split(rd: Any) -> tuple[int, int] | None:
    """(the tree's private peak, the file-backed part of its PSS at its PSS peak), from the fast series of a
    ``record.reader.RunData``; None for a record without it."""
    pss, private = rd.fast_totals(), rd.fast_totals(private=True)
    if not pss or not private:
        return None
    t, peak = max(pss, key=lambda r: r[1] or 0)
    at = dict(private).get(t) or 0
    return int(max(v or 0 for _, v in private)), max(0, int(peak or 0) - int(at))


def gpu_total(summary: Mapping[str, Any]) -> int | None:
    """The device memory the probe may use: NVML's device total, else the one a CUDA OOM's message named; a
    per-process cap a CUDA OOM named (torch.cuda.set_per_process_memory_fraction) where it is less."""
    oom = summary.get("cuda_oom") or {}
    oom = oom if isinstance(oom, Mapping) else {}
    devs = [d.get("total_bytes") for d in (summary.get("gpu") or {}).get("devices") or [] if d.get("total_bytes")]
    totals = [int(min(devs))] if devs else ([int(oom["capacity_bytes"])] if oom.get("capacity_bytes") else [])
    if oom.get("allowed_bytes"):
        totals.append(int(oom["allowed_bytes"]))
    return min(totals) if totals else None


def death(summary: Mapping[str, Any], limit_crossed: bool = False) -> str | None:
    """Whether the probe died of memory (a DEATHS key) or None: an OOM kill, a CUDA OOM, or the limit crossed."""
    cause = (summary.get("exit") or {}).get("cause")
    if cause in ("oom_kill", "cuda_oom"):
        return str(cause)
    if summary.get("cuda_oom"):
        return "cuda_oom"
    return "limit" if limit_crossed else None
