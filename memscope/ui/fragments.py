"""HTML fragments of a run shared by the live dashboard and the standalone report: the process table, the output
tail, the verdict card, the leak line. Plain strings, no widgets: the report never imports ipywidgets."""

from __future__ import annotations

import html
from typing import Any

from ..analysis.exit_cause import fault_signal
from ..analysis.stacks import text as stacks_text
from ..analysis.supervision import output_cut_words
from ..fmt import fmt_bytes
from .terminal import verdict_text

CAUSE_COLOR = {
    "ok": "#2e7d32",
    "stopped_by_user": "#555",
    "stopping": "#555",
    "exit_nonzero": "#b26a00",
    "running": "#1565c0",
}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def esc(s: Any) -> str:
    """``s`` as text safe inside HTML (the program's output is untrusted)."""
    return html.escape(str(s), quote=True)


TABLE_COLUMNS = ("pid", "role", "RSS", "anon RSS", "PSS", "swap", "peak RSS", "peak PSS", "state", "command")
# What each figure counts (each header's tooltip). The fast column was headed "private": a DataLoader worker showed
# "private 275 MiB" beside "PSS 83 MiB", its pages still shared copy-on-write with the main counted as its own.
COLUMN_HELP = {
    "RSS": "resident memory: every page the process maps, shared ones counted in full in each process",
    "anon RSS": (
        "anonymous resident memory (statm: resident - shared file pages), read every round. Not private: a forked "
        "worker's pages still shared copy-on-write with its parent count in both; PSS splits them"
    ),
    "PSS": (
        "proportional set size: each shared page divided among the processes that map it, so the tree's PSS adds "
        "up to what it holds; hover a cell for the age of its reading"
    ),
    "swap": "swapped out, at the last PSS reading",
}


def process_table(procs: dict[int, dict[str, Any]], max_exited: int | None = None) -> str:
    """One row per process. RSS, private and PSS of a row are of one moment (the row's last round: PSS measured
    then, or carried to it from the last PSS reading, whose age the cell's tooltip gives); peaks have their own
    columns. The live view and a reopened run use the same columns. Live processes first (largest RSS first),
    then exited ones, the latest exits first: at most ``max_exited`` of them, and a line for the rest."""
    # A "GPU" column only when some process has GPU memory (``gpu`` bytes: NVML's, else PyTorch's reserved).
    gpu = any(d.get("gpu") for d in procs.values())
    alive = sorted((x for x in procs.items() if x[1].get("alive", True)), key=lambda x: -(x[1].get("rss") or 0))
    gone = sorted(
        (x for x in procs.items() if not x[1].get("alive", True)),
        key=lambda x: (-(x[1].get("exit_t") or 0.0), -(x[1].get("rss") or 0)),
    )
    hidden = 0
    if max_exited is not None and len(gone) > max_exited:
        hidden, gone = len(gone) - max_exited, gone[:max_exited]
    rows = []
    for pid, d in alive + gone:
        alive = d.get("alive", True)
        if alive:
            state = "running"
        elif d.get("exit_signal"):
            state = f"died: {d['exit_signal']}"
        elif d.get("exit_code") is not None:
            state = f"exited {d['exit_code']}"
        else:
            state = "exited"
        style = "" if alive else ' style="color:#999"'
        t, pss_t = d.get("t"), d.get("pss_t")
        age = (
            f"measured {t - pss_t:.1f} s before this row's round, carried forward by the change of private memory"
            if t is not None and pss_t is not None and t > pss_t
            else "measured in this round"
        )
        cmd = esc(d.get("cmdline") or d.get("name") or "")
        role = esc(d.get("role", "other"))
        if d.get("copy_on_read"):  # copy_on_read_marks: this worker copies its parent's pages as it reads them
            role += f" <span class='memscope-cor' title='{esc(d['copy_on_read'])}' style='color:#c62828'>⚠ copy-on-read</span>"
        rows.append(
            f"<tr{style}><td>{pid}</td><td>{role}</td>"
            f"<td>{fmt_bytes(d.get('rss'))}</td><td>{fmt_bytes(d.get('private'))}</td>"
            f"<td title='{esc(age)}'>{fmt_bytes(d.get('pss'))}</td>"
            f"<td>{fmt_bytes(d.get('swap'))}</td>"
            + (f"<td>{fmt_bytes(d.get('gpu')) if d.get('gpu') else ''}</td>" if gpu else "")
            + f"<td>{fmt_bytes(d.get('peak_rss'))}</td>"
            f"<td>{fmt_bytes(d.get('peak_pss'))}</td><td>{esc(state)}</td>"
            f"<td class='memscope-cmd' title='{cmd}' style='{_CMD_STYLE}'>{cmd}</td></tr>"
        )
    columns = TABLE_COLUMNS[:6] + (("GPU",) if gpu else ()) + TABLE_COLUMNS[6:]
    head = "".join(
        "<th style='text-align:left;padding-right:10px'"
        + (f" title='{esc(COLUMN_HELP[h])}'" if h in COLUMN_HELP else "")
        + f">{h}</th>"
        for h in columns
    )
    if hidden:
        rows.append(
            f"<tr style='color:#999'><td colspan='{len(columns)}'>and {hidden} more exited "
            f"process{'es' if hidden > 1 else ''} (<code>memscope report</code> lists every one)</td></tr>"
        )
    return (
        # The cells' padding in the table itself: classic Notebook 6.5 gives a widget's table none ("121 MiB101 MiB").
        "<style>.memscope-procs td, .memscope-procs th {padding:1px 10px 1px 0}</style>"
        f"<table class='memscope-procs' style='font-size:12px;font-family:monospace;width:100%;"
        f"white-space:nowrap'><tr>{head}</tr>"
        f"{''.join(rows)}</table><div style='font-size:11px;color:#666'>RSS, anon RSS and PSS are of one "
        "moment. anon RSS (anonymous resident, read every round) counts pages a worker still shares copy-on-write "
        "with its parent in both, so it is not what a process holds alone: PSS splits shared pages among the "
        "processes that map them. PSS is read every few seconds and carried to each round by the change of anon "
        "RSS (hover a PSS cell for its age).</div>"
    )


# The command takes what the other columns leave (max-width:0 lets a cell shrink below its text) and ends in an
# ellipsis; the full command is its tooltip. A narrow notebook (a side panel open) then clips nothing.
_CMD_STYLE = "max-width:0;width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap"


def copy_on_read_marks(procs: dict[int, dict[str, Any]], cor: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """``procs`` with a ``copy_on_read`` note (its tooltip's words) on each worker that copies its parent's pages,
    from the summary's ``copy_on_read`` section (or a live ``CopyOnRead.to_dict()``)."""
    if not cor or not cor.get("detected"):
        return procs
    a = cor.get("attribute") or {}
    what = f"`{a['name']}` ({a.get('text', '')})" if a.get("name") else "the Dataset's Python objects"
    for w in cor.get("workers") or []:
        if w.get("copy_on_read") and w.get("pid") in procs:
            procs[w["pid"]] = dict(
                procs[w["pid"]],
                copy_on_read=f"copied {fmt_bytes(w.get('copied_bytes'))} of its parent's pages reading {what}, "
                f"its RSS flat at {fmt_bytes(w.get('rss_bytes'))}",
            )
    return procs


def copy_on_read_html(summary: dict[str, Any]) -> str:
    """The card's copy-on-read line (the summary's ``copy_on_read.text``), or nothing."""
    cor = summary.get("copy_on_read") or {}
    if not cor.get("detected") or not cor.get("text"):
        return ""
    return f"<div class='memscope-cor'>{esc(cor['text'])}</div>"


def with_gpu(procs: dict[int, dict[str, Any]], gpu_by_pid: dict[int, int]) -> dict[int, dict[str, Any]]:
    """``procs`` with each process's GPU bytes (``gpu``) where it has some."""
    for pid, b in gpu_by_pid.items():
        if pid in procs and b:
            procs[pid] = dict(procs[pid], gpu=b)
    return procs


def output_tail(lines: list[str], partial: str = "") -> str:
    text = "\n".join(lines[-200:] + ([partial] if partial else []))
    return (
        f"<pre class='memscope-output' style='max-height:220px;overflow:auto;font-size:11px;white-space:pre-wrap;"
        f"overflow-wrap:anywhere;background:#f8f8f8;padding:4px;margin:0'>{esc(text)}</pre>"
    )


def verdict_card(summary: dict[str, Any]) -> str:
    ex = summary["exit"]
    color = CAUSE_COLOR.get(ex["cause"], "#c62828")
    peak = summary.get("peak") or {}
    leak = summary.get("leak") or {}
    tb = ex.get("traceback")
    tb_html = (
        f"<details><summary>stack</summary><pre style='font-size:11px'>{esc(tb[-6000:])}</pre></details>" if tb else ""
    )
    leak_html = f"<div>memory: {esc(leak_line(leak))}</div>" if leak else ""
    leak_html += copy_on_read_html(summary)
    advice = summary.get("advice") or []
    if advice:
        items = "".join(f"<li>{esc(a['text'])}</li>" for a in advice[:6])
        leak_html += f"<div style='margin-top:4px'>what to do next:<ul style='margin:2px 0'>{items}</ul></div>"
    leak_html += snapshot_link(summary)
    leak_html += output_cut(summary)
    return (
        f"<div class='memscope-verdict' style='border-left:6px solid {color};padding:6px 10px;margin:6px 0;"
        f"background:#fafafa;overflow-wrap:anywhere'>"
        f"<div style='font-weight:bold;color:{color}'>{esc(ex['cause'])}{_headline(leak)}</div>"
        f"{last_words_html(summary)}"
        f"<div>{esc(ex['message'])}</div>"
        f"<div>peak tree PSS {fmt_bytes(peak.get('tree_pss_bytes'))}, RSS {fmt_bytes(peak.get('tree_rss_bytes'))}"
        f" at {peak.get('at_s', 0):.1f} s; {_plural(len(summary.get('processes', [])), 'process')}</div>{leak_html}"
        f"<div style='font-size:11px;color:#666'>record: {esc(summary.get('record', ''))} "
        f"(memscope.reopen('{esc(summary.get('run_id', ''))}'))</div>{tb_html}</div>"
    )


def _headline(leak: dict[str, Any]) -> str:
    """The kind of growth beside the cause, on the card's first line ("ok · Only spikes: the floor is flat")."""
    growth = leak.get("growth")
    words = growth.get("words") if isinstance(growth, dict) else None
    return f" · {esc(words)}" if words else ""


def last_words_html(summary: dict[str, Any]) -> str:
    """A killed or crashed run's last stacks, first on the card: one sentence, and the capture in full below it."""
    lw = summary.get("last_words")
    if not lw:
        return ""
    cap = next((c for c in summary.get("stacks") or [] if c.get("id") == lw.get("capture")), None)
    full = (
        f"<details><summary>every process's stacks then</summary><pre style='font-size:11px'>"
        f"{esc(stacks_text(cap))}</pre></details>"
        if cap
        else ""
    )
    return f"<div class='memscope-last-words'><b>Last words:</b> {esc(lw.get('text', ''))}{full}</div>"


def stacks_html(captures: list[dict[str, Any]]) -> str:
    """Every capture of the run (the report's Stacks section), newest first."""
    return "".join(
        f"<details{' open' if i == 0 else ''}><summary>{esc(c.get('reason'))} at {c.get('t_s') or 0:.1f} s: "
        f"{esc(c.get('headline'))}</summary><pre style='font-size:11px'>{esc(stacks_text(c))}</pre></details>"
        for i, c in enumerate(reversed(captures))
    )


def stack_marks(captures: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The chart's marks for the stacks captures: where each was taken, and why."""
    words = {"near_limit": "stacks: near the limit", "stall": "stacks: stall", "request": "stacks"}
    return [
        {"t_s": c["t_s"], "text": words.get(c.get("reason") or "", "stacks")}
        for c in captures or []
        if isinstance(c.get("t_s"), (int, float))
    ]


def output_cut(summary: dict[str, Any]) -> str:
    """The run's output past what the record keeps, per stream (``bounded.output``): how much was not kept."""
    out = ((summary.get("bounded") or {}).get("output")) or {}
    parts = [
        esc(output_cut_words({**d, "stream": name}))
        for name, d in sorted(out.items())
        if isinstance(d, dict) and d.get("dropped_bytes")
    ]
    return f"<div style='font-size:11px;color:#a15c00'>{' '.join(parts)}</div>" if parts else ""


def stopping_card(req: dict[str, Any], now_s: float) -> str:
    """The card between a stop asked for and the run's end (``req``: the stop_requested event's data and ``t``):
    what was sent, what comes next, and that the verdict follows the processes' end. The program's own exit takes
    its time (a torch training: its interpreter's teardown after KeyboardInterrupt, 1.7-2.3 s on 2 loaded cores)."""
    how, grace, t = req.get("how"), req.get("grace_s"), float(req.get("t") or 0.0)
    if how == "kill":
        sent = "SIGKILL sent to every process of the run"
    elif how == "terminate":
        sent = f"SIGTERM sent; SIGKILL to what is left {grace:g} s later" if grace is not None else "SIGTERM sent"
    else:
        sent = (
            f"SIGINT sent, as Ctrl-C; SIGTERM if the run is still there {grace:g} s later, then SIGKILL"
            if grace is not None
            else "SIGINT sent, as Ctrl-C"
        )
    return (
        "<div class='memscope-stopping' style='border-left:6px solid #555;padding:6px 10px;margin:6px 0;"
        f"background:#fafafa'><div style='font-weight:bold;color:#555'>stopping…</div><div>{esc(sent)} "
        f"{max(0.0, now_s - t):.1f} s ago; the verdict comes as soon as the run's processes are gone.</div></div>"
    )


def snapshot_link(summary: dict[str, Any]) -> str:
    """The CUDA memory snapshot saved at an OOM, and how to open it (a notebook cannot follow a file:// link)."""
    import shlex

    path = (summary.get("cuda_oom") or {}).get("snapshot") or next(
        (o["snapshot"] for o in (summary.get("allocator") or {}).get("ooms") or [] if o.get("snapshot")), None
    )
    if not path:
        return ""
    return (
        f"<div class='memscope-snapshot-link' style='margin-top:4px'>CUDA memory snapshot at the OOM: "
        f"<a href='{esc(path)}' download><code>{esc(path)}</code></a>; open it with "
        f"<code>memscope.open_snapshot({esc(repr(path))})</code> or "
        f"<code>memscope snapshot {esc(shlex.quote(path))} --html snapshot.html</code></div>"
    )


def leak_line(leak: dict[str, Any], spikes: list[dict[str, Any]] | None = None) -> str:
    return verdict_text(leak, spikes)


def record_procs(rd: Any) -> dict[int, dict[str, Any]]:
    """The process table's rows of a recorded run (a ``store.RunData``): each process's last round and its
    peaks, in the live table's columns."""
    procs = {
        p["pid"]: {
            "role": p["role"],
            "cmdline": p["cmdline"],
            "alive": False,
            "exit_code": p["exit_code"],
            "exit_signal": p["exit_signal"],
        }
        for p in rd.processes()
    }
    for e in rd.events("fault"):  # a worker's status is unseen: its faulthandler dump names the signal
        d = procs.get(e["pid"])
        if d is not None and not d.get("exit_signal"):
            d["exit_signal"] = fault_signal(e["data"].get("text"))
    for pid, last in rd.last_by_pid().items():
        procs.setdefault(pid, {"alive": False}).update(last)
    for pid, (rss, pss) in rd.peaks_by_pid().items():
        procs.setdefault(pid, {"alive": False}).update(peak_rss=rss, peak_pss=pss)
    return procs
