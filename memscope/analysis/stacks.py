"""Stacks of every process of the run ("last words"): faulthandler's dumps parsed, grouped and put in words.

A capture (the "stacks" event's data, made by session/stacks.py) lists each process of the tree with its role,
state, memory and, where its agent answered, every thread's frames (file, line, function and the source line).
Here it is read: the main thread of each process, identical processes collapsed by role ("2 DataLoader workers
waiting in get ← _worker_loop"), and the one sentence the verdict card shows first. Pure: data in, words out.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from ..fmt import fmt_bytes

_HEAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? \(most recent call first\):")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (\S+)')
_ROLE_WORDS = {
    "main": ("the main process", "main processes"),
    "dataloader_worker": ("DataLoader worker", "DataLoader workers"),
    "compile_worker": ("compile worker", "compile workers"),
    "rank": ("rank", "ranks"),
    "wrapper": ("wrapper", "wrappers"),
    "helper": ("helper", "helpers"),
    "other": ("process", "processes"),
}
# States /proc gives a process without a stack of its own to show.
STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "traced", "Z": "exited"}
# Why a process has no stack in a capture.
STATUS_WORDS = {
    "no_agent": "no memscope agent (not Python, or started with python -I/-S)",
    "no_handler": "no stacks handler (the program uses that signal, or exec'd away from the agent): not signalled",
    "exited": "exited during the capture",
    "signal_taken": "its agent could not answer (the GIL held) and the program handles the stacks signal (SIGURG) "
    "itself: not signalled",
    "asleep": "asleep in a wait while its agent could not answer: not signalled, so as not to wake it",
    "no_answer": "answered neither its agent's request nor the stacks signal before the deadline (busy in C code "
    "holding the interpreter lock, or the program handles SIGURG itself)",
    "partial": "answered in part before the deadline",
}
_MP_BOOT = "multiprocessing/process.py"
_PLUMBING = ("/selectors.py", "/threading.py", "/connection.py", "/synchronize.py", "/socket.py", "/popen_fork.py")
KEEP = 20  # captures kept in the summary (all stay in the record)
FATAL_CAUSES = ("oom_kill", "killed", "worker_crash", "cuda_oom")


def parse_dump(text: str) -> list[dict[str, Any]]:
    """faulthandler's dump (all threads) as [{"thread", "current", "frames": [{"file", "line", "func"}]}],
    innermost frame first, as faulthandler writes them."""
    threads: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            cur = {"thread": m.group(2), "current": m.group(1) == "Current thread", "frames": []}
            if m.group(3):
                cur["name"] = m.group(3)
            threads.append(cur)
            continue
        f = _FRAME.match(line)
        if f and cur is not None:
            lineno = int(f.group(2)) if f.group(2).isdigit() else 0
            cur["frames"].append({"file": f.group(1), "line": lineno, "func": f.group(3)})
    return threads


def is_library(path: str) -> bool:
    """Whether a frame's file is a library's (site-packages, the standard library, frozen modules)."""
    return any(m in path for m in ("/site-packages/", "/dist-packages/", "/lib/python", "<frozen ", "/memscope/"))


def main_thread(threads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The process's main thread: the one whose outermost frame is not a threading bootstrap (the thread that
    took the signal, where several qualify)."""
    if not threads:
        return None

    def is_main(t: dict[str, Any]) -> bool:
        fr = t["frames"]
        return bool(fr) and fr[-1]["func"] not in ("_bootstrap", "_bootstrap_inner")

    mains = [t for t in threads if is_main(t)]
    return next((t for t in mains if t["current"]), mains[0] if mains else threads[0])


def _no_comment(code: str) -> str:
    """A source line without its inline comment ("x = f()  # why"), where the cut is surely outside a string."""
    i = code.find("  #")
    if i > 0 and code[:i].count('"') % 2 == 0 and code[:i].count("'") % 2 == 0:
        return code[:i].rstrip()
    return code


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def where(thread: dict[str, Any] | None) -> str:
    """Where a thread is, in words: the innermost frame of the user's own code with its source line and two
    callers ("train.py:142 `bank = np.concatenate(chunks)` (mine_negatives ← train_epoch)"), or, in library code
    only, the innermost functions ("get ← _worker_loop")."""
    if not thread or not thread["frames"]:
        return "no Python frame"
    frames = thread["frames"]
    # A forked worker (multiprocessing, a DataLoader's) still shows its parent's frames up to the fork: its own
    # story starts at the process's _bootstrap.
    cut = next((i for i, f in enumerate(frames) if f["func"] == "_bootstrap" and f["file"].endswith(_MP_BOOT)), None)
    if cut is not None:
        frames = frames[: cut + 1]
    user = [i for i, f in enumerate(frames) if not is_library(f["file"])]
    if user:
        i = user[0]
        f = frames[i]
        code = f" `{_no_comment(f['code'])}`" if f.get("code") else ""
        callers = [frames[j]["func"] for j in user[1:3] if frames[j]["func"] != "<module>"]
        chain = " ← ".join([f["func"], *callers]) if f["func"] != "<module>" else ""
        lib = ""
        if i > 0:  # the user's line called into a library: say what it is doing there
            lib = f", inside {frames[0]['func']} ({_base(frames[0]['file'])})"
        return f"{_base(f['file'])}:{f['line']}{code}" + (f" ({chain})" if chain else "") + lib
    # Library code only: name the functions above the plumbing (selectors, locks, pipes) that every wait ends in.
    above = [f for f in frames if not f["file"].endswith(_PLUMBING)] or frames
    return " ← ".join(f["func"] for f in above[:2]) + f" ({_base(above[0]['file'])})"


def signature(proc: dict[str, Any]) -> tuple[tuple[tuple[str, int, str], ...], ...]:
    """What makes two processes' stacks the same: every thread's frames, thread ids aside."""
    return tuple(
        sorted(tuple((f["file"], f["line"], f["func"]) for f in t["frames"]) for t in proc.get("threads") or [])
    )


def groups(capture: dict[str, Any]) -> list[dict[str, Any]]:
    """Processes with identical stacks (or the same missing-stack status) collapsed, by role, main first."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in capture.get("processes") or []:
        has = bool(p.get("threads"))
        key = (p.get("role", "other"), p.get("status"), signature(p) if has else p.get("state"))
        g = out.get(key)
        if g is None:
            g = out[key] = {
                "role": p.get("role", "other"),
                "status": p.get("status"),
                "pids": [],
                "state": p.get("state"),
                "where": where(main_thread(p["threads"])) if has else None,
                "threads": len(p.get("threads") or []),
                "bytes": 0,
            }
        g["pids"].append(p["pid"])
        g["bytes"] += p.get("bytes") or 0
    order = list(_ROLE_WORDS)
    return sorted(out.values(), key=lambda g: (order.index(g["role"]) if g["role"] in order else 99, -len(g["pids"])))


def group_words(g: dict[str, Any]) -> str:
    """One group in words: "2 DataLoader workers waiting in get ← _worker_loop (queues.py)"."""
    n = len(g["pids"])
    one, many = _ROLE_WORDS.get(g["role"], (g["role"], g["role"]))
    who = one if n == 1 else f"{n} {many}"
    if g["role"] == "main" and n == 1:
        who = "the main process"
    elif n == 1:
        who = f"{one} {g['pids'][0]}"
    if g["where"] is not None:
        verb = "waiting in" if g.get("state") in ("S", "D") and g["role"] != "main" else "in"
        return f"{who} {verb} {g['where']}" if verb == "waiting in" else f"{who} was in {g['where']}"
    state = STATES.get(g.get("state") or "", g.get("state") or "?")
    return f"{who}: {STATUS_WORDS.get(g['status'], g['status'])} ({state})"


def headline(capture: dict[str, Any]) -> str:
    """The capture in one sentence (without its time): "at 96 % of the 2.0 GiB limit, the main process was in
    train.py:142 `...` (mine_negatives ← train_epoch); 2 DataLoader workers waiting in get ← _worker_loop"."""
    parts = [group_words(g) for g in groups(capture)]
    at = ""
    frac = capture.get("fraction")
    if capture.get("limit_bytes") and frac is not None and (capture.get("reason") != "request" or frac >= 0.5):
        at = f"at {capture['fraction'] * 100:.0f} % of the {fmt_bytes(capture['limit_bytes'])} limit, "
    grew = capture.get("grew_fastest")
    grew_s = ""
    if grew and grew.get("bytes_per_s", 0) >= 1 << 20 and capture.get("reason") == "near_limit":
        grew_s = (
            f" (fastest growth: pid {grew['pid']}, {grew.get('role', '?')}, "
            f"+{fmt_bytes(grew['bytes_per_s'])}/s over {grew.get('window_s', 0):.0f} s)"
        )
    return at + "; ".join(parts) + grew_s if parts else at + "no process to show"


def text(capture: dict[str, Any]) -> str:
    """The whole capture as text: the headline, then each group's threads with their frames and source lines."""
    reason = {"request": "on request", "near_limit": "near the limit", "stall": "on a stall"}.get(
        capture.get("reason", ""), capture.get("reason", "")
    )
    lines = [f"Stacks {reason} at {capture.get('t_s', 0):.1f} s ({capture.get('duration_s', 0) * 1000:.0f} ms): "]
    lines[0] += headline(capture)
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in capture.get("processes") or []:
        by_key.setdefault((p.get("role"), p.get("status"), signature(p)), p)
    for g in groups(capture):
        mem = f", {fmt_bytes(g['bytes'])}" if g["bytes"] else ""
        lines.append("")
        lines.append(f"== {group_words(g)} [pid {', '.join(map(str, g['pids']))}{mem}]")
        rep = next((p for p in capture.get("processes") or [] if p["pid"] == g["pids"][0]), None)
        for t in (rep or {}).get("threads") or []:
            lines.append(f"  thread {t['thread']}{' (took the signal)' if t['current'] else ''}:")
            for f in t["frames"]:
                code = f"    {f['code']}" if f.get("code") else ""
                lines.append(f'    File "{f["file"]}", line {f["line"]} in {f["func"]}')
                if code:
                    lines.append("  " + code)
    return "\n".join(lines)


@dataclass
class Stacks:
    """One capture of every process's stacks (``Run.stacks()``): ``processes`` as captured, ``groups`` collapsed,
    ``text`` in full; shown as text or, in a notebook, as escaped HTML."""

    data: dict[str, Any] = field(default_factory=dict)

    @property
    def processes(self) -> list[dict[str, Any]]:
        """Each process: pid, role, state, status, bytes and its threads' frames."""
        return list(self.data.get("processes") or [])

    @property
    def groups(self) -> list[dict[str, Any]]:
        """Identical stacks collapsed by role."""
        return groups(self.data)

    @property
    def headline(self) -> str:
        """The capture in one sentence."""
        return headline(self.data)

    @property
    def text(self) -> str:
        """The capture in full, as text."""
        return text(self.data)

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        # File names, function names and source lines come from the user's program: escaped, every one.
        return (
            "<details open class='memscope-stacks'><summary><b>Stacks</b> "
            + html.escape(self.headline)
            + "</summary><pre style='font-size:12px;max-height:30em;overflow:auto'>"
            + html.escape(self.text)
            + "</pre></details>"
        )


def compact(capture: dict[str, Any]) -> dict[str, Any]:
    """A capture as the summary keeps it: when, why, the headline, the groups, and every process's frames."""
    return {
        "id": capture.get("id"),
        "t_s": capture.get("t_s"),
        "reason": capture.get("reason"),
        "duration_s": capture.get("duration_s"),
        "tree_bytes": capture.get("tree_bytes"),
        "limit_bytes": capture.get("limit_bytes"),
        "fraction": capture.get("fraction"),
        "grew_fastest": capture.get("grew_fastest"),
        "roles": capture.get("roles"),
        "headline": headline(capture),
        "groups": [dict(g, words=group_words(g)) for g in groups(capture)],
        "processes": capture.get("processes") or [],
    }


def summary_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary's ``stacks``: every capture, in time order."""
    # The last KEEP captures (a script calling run.stacks() in a loop must not grow the summary without end).
    return [compact(dict(e["data"], t_s=e["data"].get("t_s", round(e["t"], 3)))) for e in events[-KEEP:]]


def last_words(
    captures: list[dict[str, Any]],
    exit_: dict[str, Any],
    end_t: float | None,
    agent: bool,
    agents_seen: bool,
    last_fraction: float | None = None,
    high_water: float | None = None,
) -> dict[str, Any] | None:
    """The summary's ``last_words`` for a run that ended by a kill or a crash (oom_kill, killed, worker_crash,
    cuda_oom): the last capture before the end in one sentence, or why there is none. None for other ends."""
    if exit_.get("cause") not in FATAL_CAUSES:
        return None
    before = [c for c in captures if end_t is None or (c.get("t_s") or 0) <= end_t]
    if not before:
        if not agent:
            why = "no stacks: the run had no agent (--no-agent or attached)"
        elif not agents_seen:
            why = "no stacks: no process of the run loaded memscope's agent (not Python, or python -I)"
        elif high_water is None:
            why = "no stacks: this record was written by a memscope that did not take them"
        elif not high_water:
            why = "no stacks: automatic captures were off (--stacks-at 0) and none was asked for"
        elif last_fraction is not None and last_fraction < high_water:
            why = (
                f"no stacks: the tree was at {last_fraction * 100:.0f} % of its limit at the last sample, below "
                f"the {high_water * 100:.0f} % high-water mark where memscope takes them (--stacks-at)"
            )
        else:
            why = (
                "no stacks: memory rose past the high-water mark and the kill came between two sampling rounds "
                "(too fast to catch); lower --stacks-at or take them by hand (run.stacks())"
            )
        return {"capture": None, "text": why}
    c = before[-1]
    word = "kill" if exit_.get("cause") in ("oom_kill", "killed") else "crash"
    ago = f"{max(0.0, end_t - c['t_s']):.1f} s before the {word}, " if end_t is not None else ""
    return {"capture": c.get("id"), "t_s": c.get("t_s"), "reason": c.get("reason"), "text": ago + c["headline"]}
