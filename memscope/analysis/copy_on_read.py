"""DataLoader copy-on-read (pytorch/pytorch#13246), told from the record's PSS rounds and named from the workers' own
``dataset_objects`` messages. Pure: series in, a finding out.

A forked worker maps its parent's pages copy-on-write. Reading a Python object writes its reference count, so a
worker that reads a Dataset held as Python objects (a list of dicts) copies every page it reads: its own memory
(PSS, and the anonymous part of it) rises while its RSS and its anonymous RSS stay flat (the pages were already
mapped), the part it shares falls (RSS - PSS), and its parent's PSS rises too without the parent allocating (the
pages it keeps are shared by fewer). The tree really grows: each copy is a new page. It is bounded: a worker can
copy at most what it shares with its parent, so the tree levels off near num_workers x what the workers touch;
a linear time to the limit is wrong for it. The same data in numpy arrays is read without writing to its pages.

Measured on this machine (torch 2.13 CPU, 3 forked workers, shuffled): 600,000 dicts, each worker's anonymous PSS
rose 84 -> 175 MiB with its RSS flat at 358 MiB; the same data in numpy arrays, 43 -> 78 MiB, all of it the
interpreter's own objects (modules, functions) that a full garbage collection touches: hence MIN_WORKER_BYTES.

The signature (stable: the verdict, analysis/leak.py, calls it on a prefix of a live record):

``assess(rd, until_s=None) -> CopyOnRead`` reads the record (``RunData``) up to ``until_s`` seconds (None: all of
it) and calls ``detect(procs, rounds, attributions)``, the pure rule over
  ``procs``: [{"pid", "ppid", "role", "first_t", "exit_t"}] (``RunData.processes()``),
  ``rounds``: {pid: [(t, rss, pss, anon_pss, anon_rss)]} in time order (``RunData.pss_rounds_by_pid``),
  ``attributions``: the ``dataset_objects`` events [{"t", "pid", "data"}] (the workers' own census of the Dataset).
``CopyOnRead``: ``detected`` (bool), ``workers`` (a ``WorkerCopy`` per worker that copied), ``since_s`` (the first
round of the growth seen), ``at_s`` (the last round read), ``bound_bytes`` (the most the tree reaches if every
worker copies what it can; None when not detected), ``attribute`` (the Dataset attribute that holds most Python
objects, or None), ``text()`` (one sentence for a person), ``advice()``, ``to_dict()`` (the summary's
``copy_on_read`` section, model.CopyOnReadInfo).

Live: the record so far is a prefix (``assess(RunData(run.record_path), until_s=run.elapsed())``: the dashboard
does so every 5 s while workers are alive), and each worker's census is in the run's live state as it arrives
(``run.snapshot.procs[pid]["dataset_objects"]``: its top attribute, with ``text``; ``attribute_rows`` reads a
report). Measured: named 2 s after 3 workers forked over 800,000 dicts.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..fmt import fmt_bytes
from ..model import CopyOnReadInfo
from ..record.reader import RunData

MiB = 1 << 20
MIN_WORKER_BYTES = 64 * MiB  # one worker's copy that counts (the interpreter's own objects alone: ~35 MiB seen)
MIN_TOTAL_BYTES = 128 * MiB  # the workers' copies together
FLAT_SHARE = 0.25  # RSS and anon RSS may move by this share of the copy (a worker's batches, its own allocations)
FLAT_SLACK = 16 * MiB  # ... plus this much
LEVEL_S = 10.0  # a copy that rose less than LEVEL_SHARE of itself (or 4 MiB) over this long has levelled off
LEVEL_SHARE = 0.03
TREE_SHARE = 0.5  # the tree's PSS must rise by at least this share of what the workers copied in the window
WORKER_ROLE = "dataloader_worker"

# (t, rss, pss, anon_pss | None, anon_rss | None), as RunData.pss_rounds_by_pid gives them
Round = tuple[float, int, int, "int | None", "int | None"]


@dataclass(frozen=True)
class WorkerCopy:
    """One worker's copy-on-read: its figures at the first and last round of the window where its sharers held."""

    pid: int
    parent: int | None
    since_s: float
    at_s: float
    rss_bytes: int  # RSS at the last round (flat: the pages were mapped from the fork on)
    rss_change_bytes: int
    anon_rss_bytes: int | None  # anonymous RSS (statm), likewise flat
    anon_rss_change_bytes: int | None
    pss_start_bytes: int
    pss_bytes: int
    copied_bytes: int  # its own memory's rise (anonymous PSS), from its fork's estimate where the window starts there
    shared_start_bytes: int  # RSS - PSS: the part it shares, falling
    shared_bytes: int
    shareable_bytes: int  # what it still shares with its parent (anonymous pages): the most it can still copy
    flat: bool  # RSS and anon RSS stayed flat while it copied
    levelled: bool = False  # its copy has stopped rising (LEVEL_S without a rise): it has read what it reads

    @property
    def counts(self) -> bool:
        """Copy-on-read: flat RSS, and a material copy."""
        return self.flat and self.copied_bytes >= MIN_WORKER_BYTES

    def to_dict(self) -> dict[str, Any]:
        """The summary's per-worker row."""
        return {
            "pid": self.pid,
            "parent": self.parent,
            "since_s": round(self.since_s, 3),
            "at_s": round(self.at_s, 3),
            "rss_bytes": self.rss_bytes,
            "rss_change_bytes": self.rss_change_bytes,
            "anon_rss_bytes": self.anon_rss_bytes,
            "anon_rss_change_bytes": self.anon_rss_change_bytes,
            "pss_start_bytes": self.pss_start_bytes,
            "pss_bytes": self.pss_bytes,
            "copied_bytes": self.copied_bytes,
            "shared_start_bytes": self.shared_start_bytes,
            "shared_bytes": self.shared_bytes,
            "shareable_bytes": self.shareable_bytes,
            "levelled": self.levelled,
            "copy_on_read": self.counts,
        }


@dataclass(frozen=True)
class CopyOnRead:
    """What the record says about copy-on-read (see the module's docstring)."""

    detected: bool
    workers: tuple[WorkerCopy, ...] = ()
    parent: dict[str, Any] | None = None
    since_s: float | None = None
    at_s: float | None = None
    tree_start_bytes: int | None = None
    tree_bytes: int | None = None
    bound_bytes: int | None = None
    attribute: dict[str, Any] | None = None
    reason: str = ""
    attributes: tuple[dict[str, Any], ...] = field(default=())

    @property
    def levelled(self) -> bool:
        """Every copying worker's copy has stopped rising: the tree is at its bound."""
        return bool(self.copying) and all(w.levelled for w in self.copying)

    @property
    def copying(self) -> list[WorkerCopy]:
        """The workers that copy."""
        return [w for w in self.workers if w.counts]

    def text(self) -> str:
        """One sentence for a person: what the workers do, what holds it, where it ends."""
        if not self.detected:
            return self.reason
        ws = self.copying
        n = len(ws)
        each = sum(w.copied_bytes for w in ws) / n
        rss = sum(w.rss_bytes for w in ws) / n
        what = _attribute_words(self.attribute)
        parent = ""
        p = self.parent or {}
        if p.get("pss_change_bytes", 0) > 0:
            parent = f"; the main process's PSS rose {_b(p['pss_change_bytes'])} without it allocating"
        bound = (
            f"; it has levelled off at {_b(self.bound_bytes)}"
            if self.levelled
            else f"; bounded: the tree levels off at {_b(self.bound_bytes)} at most"
            if self.bound_bytes
            else ""
        )
        return (
            f"Copy-on-read: {n} DataLoader worker{'s' if n > 1 else ''} copied the main process's pages as "
            f"{'they' if n > 1 else 'it'} read {what} (+{_b(each)} each, their RSS flat at {_b(rss)}){parent}{bound}."
        )

    def advice(self) -> str | None:
        """The fixes that work, naming the attribute; None when not detected."""
        if not self.detected:
            return None
        ws = self.copying
        a = self.attribute
        name = f"`{a['name']}`" if a and a.get("name") else "the Dataset's samples"
        held = f" ({a['text']})" if a and a.get("text") else " (lists of dicts, of strings)" if not a else ""
        fewer = (
            f"; fewer workers copy less (num_workers={len(ws) - 1} saves about {_b(_mean_copy(ws))})"
            if len(ws) > 1
            else ""
        )
        return (
            f"Keep {name}{held} out of Python objects: every read writes reference counts, so each forked DataLoader "
            f"worker copies the pages it reads. Store it in numpy arrays (strings as one bytes buffer with an "
            f"offsets array) or an Arrow table, and build each sample from them in __getitem__{fewer}. "
            f"gc.freeze() before the DataLoader starts does not stop it: it spares the garbage collector's writes, "
            f"not the reference counts."
        )

    def to_dict(self) -> CopyOnReadInfo:
        """The summary's ``copy_on_read`` section."""
        return {
            "detected": self.detected,
            "workers": [w.to_dict() for w in self.workers],
            "parent": self.parent,
            "since_s": None if self.since_s is None else round(self.since_s, 3),
            "at_s": None if self.at_s is None else round(self.at_s, 3),
            "tree_start_bytes": self.tree_start_bytes,
            "tree_bytes": self.tree_bytes,
            "copied_bytes": sum(w.copied_bytes for w in self.copying),
            "bound_bytes": self.bound_bytes,
            "levelled": self.levelled,
            "attribute": self.attribute,
            "attributes": list(self.attributes),
            "reason": self.reason,
            "text": self.text() if self.detected else None,
            "advice": self.advice(),
        }


def _b(n: float | None) -> str:
    return fmt_bytes(n, "view")


def _mean_copy(ws: Sequence[WorkerCopy]) -> float:
    return sum(w.copied_bytes for w in ws) / max(1, len(ws))


def _attribute_words(a: dict[str, Any] | None) -> str:
    if not a or not a.get("name"):
        return "the Dataset's Python objects"
    return f"`{a['name']}` ({a['text']})" if a.get("text") else f"`{a['name']}`"


# -- the rule ---------------------------------------------------------------------------------------------------
def assess(rd: RunData, until_s: float | None = None) -> CopyOnRead:
    """Copy-on-read in a record, up to ``until_s`` s (a live run's prefix) or all of it."""
    procs = rd.processes()
    rounds = rd.pss_rounds_by_pid(until_s)
    events = [e for e in rd.events("dataset_objects") if until_s is None or e["t"] <= until_s]
    return detect(procs, rounds, events, until_s)


def detect(
    procs: Sequence[Mapping[str, Any]],
    rounds: Mapping[int, Sequence[Round]],
    attributions: Iterable[Mapping[str, Any]] = (),
    until_s: float | None = None,
) -> CopyOnRead:
    """The rule (the module's docstring says what each argument is)."""
    attrs = _attributions(attributions)
    info = {p["pid"]: p for p in procs}
    workers = [p for p in procs if p.get("role") == WORKER_ROLE and rounds.get(p["pid"])]
    if not workers:
        return CopyOnRead(False, reason="No DataLoader worker was measured.", attributes=attrs)
    end = until_s if until_s is not None else float("inf")
    copies = []
    for w in workers:
        c = _worker_copy(w, info, rounds, end)
        if c is not None:
            copies.append(c)
    copying = [c for c in copies if c.counts]
    at = max((r[0] for rs in rounds.values() for r in rs), default=None)
    attribute = _pick(attrs, {c.pid for c in copying} or {c.pid for c in copies})
    if not copying or sum(c.copied_bytes for c in copying) < MIN_TOTAL_BYTES:
        moved = max((c.copied_bytes for c in copies), default=0)
        return CopyOnRead(
            False,
            tuple(copies),
            at_s=at,
            attribute=attribute,
            attributes=attrs,
            reason=(
                f"No copy-on-read: the DataLoader workers' own memory rose at most {_b(moved)} each with their RSS "
                "flat (what the interpreter's own objects cost them), not the Dataset."
            ),
        )
    since = min(c.since_s for c in copying)
    last = max(c.at_s for c in copying)
    t0, t1 = _tree_at(rounds, info, since), _tree_at(rounds, info, last)
    window_copy = sum(_window_copy(rounds[c.pid], c) for c in copying)
    if t0 is not None and t1 is not None and t1[1] - t0[1] < TREE_SHARE * window_copy:
        return CopyOnRead(
            False,
            tuple(copies),
            at_s=at,
            attribute=attribute,
            attributes=attrs,
            reason="No copy-on-read: the workers' PSS rose but the tree's did not (their parent let go of the pages).",
        )
    parent = _parent(copying, rounds, since, last)
    return CopyOnRead(
        True,
        tuple(copies),
        parent,
        since_s=since,
        at_s=at,
        tree_start_bytes=t0[1] if t0 else None,
        tree_bytes=t1[1] if t1 else None,
        bound_bytes=_bound(copying, t1[1] if t1 else None, attribute),
        attribute=attribute,
        attributes=attrs,
        reason="The workers' own memory rose with their RSS flat: they copy their parent's pages as they read them.",
    )


def _alive(p: Mapping[str, Any], t: float) -> bool:
    return (p.get("first_t") or 0.0) <= t and (p.get("exit_t") is None or p["exit_t"] > t)


def _worker_copy(
    w: Mapping[str, Any], info: Mapping[int, Mapping[str, Any]], rounds: Mapping[int, Sequence[Round]], end: float
) -> WorkerCopy | None:
    """The worker's copy in the window where the processes sharing its parent's pages stayed the same (a sibling's
    birth or exit moves everyone's PSS with nothing copied); the window with the largest flat copy."""
    pid, ppid = w["pid"], w.get("ppid")
    rs = [r for r in rounds[pid] if r[2] is not None and r[0] <= end]
    if len(rs) < 2:
        return None
    family = [p for p in info.values() if p["pid"] == ppid or (ppid is not None and p.get("ppid") == ppid)]
    changes = sorted(
        {float(x) for p in family for x in (p.get("first_t"), p.get("exit_t")) if isinstance(x, (int, float))}
    )
    windows: list[list[Round]] = []
    keys: list[int] = []
    for r in rs:
        key = sum(1 for c in changes if c <= r[0])  # the window a round is in: how many changes came before it
        if keys and keys[-1] == key:
            windows[-1].append(r)
        else:
            windows.append([r])
            keys.append(key)
    best = None
    born = True  # no window of two rounds yet: the worker's copy since its fork is still to be read
    for win in windows:
        if len(win) < 2:
            continue
        sharers = 1 + sum(1 for p in family if p["pid"] != ppid and _alive(p, win[0][0]))
        c = _copy(pid, ppid, win, born=born, sharers=max(2, sharers))
        born = False
        if best is None or (c.flat, c.copied_bytes) > (best.flat, best.copied_bytes):
            best = c
    return best


def _copy(pid: int, ppid: int | None, win: Sequence[Round], born: bool, sharers: int) -> WorkerCopy:
    a, b = win[0], win[-1]
    anon_a = a[3] if a[3] is not None else a[2]
    anon_b = b[3] if b[3] is not None else b[2]
    copied = anon_b - anon_a
    if born and a[4]:
        # The first reading comes a PSS round after the fork: the copy began at the fork, when the worker shared
        # every anonymous page it mapped (its anon RSS) with its parent and its siblings.
        copied += max(0, anon_a - a[4] // sharers)
    d_rss = b[1] - a[1]
    d_anon = b[4] - a[4] if a[4] is not None and b[4] is not None else None
    slack = FLAT_SHARE * max(copied, 0) + FLAT_SLACK
    flat = copied > 0 and abs(d_rss) <= slack and (d_anon is None or abs(d_anon) <= slack)
    # What it still shares: anon RSS = own + shared, anon PSS = own + shared / sharers (the pages shared by all).
    shareable = max(0, (b[4] or 0) - anon_b) * sharers // (sharers - 1) if b[4] else 0
    return WorkerCopy(
        pid=pid,
        parent=ppid,
        since_s=a[0],
        at_s=b[0],
        rss_bytes=b[1],
        rss_change_bytes=d_rss,
        anon_rss_bytes=b[4],
        anon_rss_change_bytes=d_anon,
        pss_start_bytes=a[2],
        pss_bytes=b[2],
        copied_bytes=int(copied),
        shared_start_bytes=max(0, a[1] - a[2]),
        shared_bytes=max(0, b[1] - b[2]),
        shareable_bytes=int(shareable),
        flat=flat,
        levelled=_levelled(win, copied),
    )


def _window_copy(rs: Sequence[Round], c: WorkerCopy) -> int:
    """What ``c`` copied between its window's first and last rounds (without its fork's estimate)."""
    a = next((r for r in rs if r[0] == c.since_s), None)
    b = next((r for r in rs if r[0] == c.at_s), None)
    if a is None or b is None:
        return 0
    return (b[3] if b[3] is not None else b[2]) - (a[3] if a[3] is not None else a[2])


def _tree_at(
    rounds: Mapping[int, Sequence[Round]], info: Mapping[int, Mapping[str, Any]], t: float
) -> tuple[float, int] | None:
    """The tree's PSS at ``t``: each process alive then, at its last reading at or before it (a bisection a
    process: a run that restarts its workers every epoch has hundreds)."""
    total, seen = 0, False
    for pid, rs in rounds.items():
        if pid in info and not _alive(info[pid], t):
            continue
        i = bisect_right(rs, t, key=lambda r: r[0])
        if i:
            total += rs[i - 1][2] or 0
            seen = True
    return (t, total) if seen else None


def _parent(
    ws: Sequence[WorkerCopy], rounds: Mapping[int, Sequence[Round]], since: float, last: float
) -> dict[str, Any] | None:
    """The parent's PSS and anon RSS over the window: its PSS rises as its pages are shared by fewer, its anon RSS
    (what it allocates) stays flat."""
    parents = {w.parent for w in ws if w.parent is not None}
    if len(parents) != 1:
        return None
    pid = parents.pop()
    rs = [r for r in rounds.get(pid, ()) if since <= r[0] <= last]
    if len(rs) < 2:
        return None
    a, b = rs[0], rs[-1]
    return {
        "pid": pid,
        "pss_start_bytes": a[2],
        "pss_bytes": b[2],
        "pss_change_bytes": (b[2] or 0) - (a[2] or 0),
        "anon_rss_start_bytes": a[4],
        "anon_rss_bytes": b[4],
        "anon_rss_change_bytes": b[4] - a[4] if a[4] is not None and b[4] is not None else None,
    }


def _levelled(win: Sequence[Round], copied: float) -> bool:
    """Whether the copy rose less than LEVEL_SHARE of itself over the window's last LEVEL_S."""
    b = win[-1]
    if b[0] - win[0][0] < LEVEL_S:
        return False
    a = next(r for r in reversed(win) if b[0] - r[0] >= LEVEL_S)
    rise = (b[3] if b[3] is not None else b[2]) - (a[3] if a[3] is not None else a[2])
    return rise <= max(4 * MiB, LEVEL_SHARE * copied)


def _bound(ws: Sequence[WorkerCopy], tree: int | None, attribute: dict[str, Any] | None) -> int | None:
    """Where the tree levels off: now, plus what each worker can still copy — all it shares with its parent, or,
    where the workers said what the Dataset holds, what is left of that."""
    if tree is None:
        return None
    held = (attribute or {}).get("total_bytes") or 0
    more = 0
    for w in ws:
        if w.levelled:
            continue  # it has read what it reads: it copies no more
        left = w.shareable_bytes
        if held:
            left = min(left, max(0, held - w.copied_bytes))
        more += left
    return tree + more


# -- the workers' census of their Dataset ----------------------------------------------------------------------
def _attributions(events: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Each worker's last ``dataset_objects`` report, as {pid, t, dataset, attributes, total_bytes, ...}."""
    by_pid: dict[Any, dict[str, Any]] = {}
    for e in events:
        d = e.get("data")
        if isinstance(d, dict) and isinstance(d.get("attributes"), list):
            by_pid[e.get("pid")] = dict(d, pid=e.get("pid"), t=e.get("t"))
    return tuple(by_pid.values())


def attribute_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One worker's ``dataset_objects`` report: its attributes that hold Python objects, largest first, each with
    its ``text`` ("list of 3,000,000 dict, ~0.9 GiB")."""
    rows = [r for r in report.get("attributes") or [] if isinstance(r, dict) and r.get("python_objects")]
    rows.sort(key=lambda r: r.get("bytes") or 0, reverse=True)
    return [dict(r, text=attribute_text(r)) for r in rows]


def _pick(attrs: Sequence[dict[str, Any]], pids: set[int]) -> dict[str, Any] | None:
    """The attribute holding the most Python objects' bytes, from a copying worker's report where there is one."""
    reports = [a for a in attrs if a.get("pid") in pids] or list(attrs)
    rows = [
        dict(r, pid=rep.get("pid"), dataset=rep.get("dataset"))
        for rep in reports
        for r in rep.get("attributes") or []
        if isinstance(r, dict) and r.get("python_objects")
    ]
    if not rows:
        return None
    top = max(rows, key=lambda r: r.get("bytes") or 0)
    held = sum(r.get("bytes") or 0 for r in rows if r.get("pid") == top.get("pid"))
    return dict(top, text=attribute_text(top), total_bytes=held)


def attribute_text(r: Mapping[str, Any]) -> str:
    """What an attribute holds, in the words of the census: "list of 3,000,000 dict, ~0.9 GiB"."""
    kind = str(r.get("type") or "object")
    n = r.get("len")
    item = r.get("item_type")
    b = r.get("bytes")
    size = ""
    if isinstance(b, int) and b > 0:  # "~0.9 GiB" from half a GiB on: an estimate, as close as it says
        size = f", ~{b / (1 << 30):.1f} GiB" if b >= 512 * MiB else f", ~{fmt_bytes(b)}"
    if isinstance(n, int):
        return f"{kind} of {n:,} {item}{size}" if item else f"{kind} of {n:,} items{size}"
    return f"{kind}{size}"
