"""A dashboard's static copy: what a saved notebook shows where its live widgets cannot be drawn (opened again
without the kernel that made them, nbconvert, nbviewer): the status line, the verdict card, a picture of the
memory (inline SVG) and the process table, as they last were.

It is a text/html output beside the widget view. CSS pairs the two by the dashboard's key: while the live view is
drawn the copy is hidden; where the view cannot be drawn, the copy shows and the widget's error line is hidden.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..fmt import fmt_bytes, fmt_elapsed

__all__ = ["static_html", "memory_svg"]

_W, _H, _MAX_POINTS = 600, 140, 300


def _decimate(t: Sequence[float], y: Sequence[float]) -> list[tuple[float, float]]:
    n = min(len(t), len(y))
    step = max(1, n // _MAX_POINTS)
    pts = [(float(t[i]), float(y[i])) for i in range(0, n, step) if y[i] is not None]
    if n and (n - 1) % step:
        pts.append((float(t[n - 1]), float(y[n - 1] or 0)))
    return pts


def _tree_total(by_role: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The roles' PSS summed on the times they share (RunSeries gives every role the same times)."""
    series = [s for s in by_role.values() if isinstance(s, Mapping) and s.get("t")]
    if not series:
        return [], []
    t = list(series[0]["t"])
    y = [0.0] * len(t)
    for s in series:
        if list(s["t"]) != t:
            continue
        for i, v in enumerate(s["y"]):
            y[i] += float(v or 0)
    return t, y


def memory_svg(snap: Mapping[str, Any]) -> str:
    """The tree's PSS and the main process's RSS over the run, as a small inline SVG (no script, no library)."""
    lines = []
    tt, ty = _tree_total(snap.get("tree_pss_by_role") or {})
    if tt:
        lines.append(("tree PSS", "#4c78a8", _decimate(tt, ty)))
    main = snap.get("main_rss") or {}
    if main.get("t"):
        lines.append(("main RSS", "#e45756", _decimate(main["t"], main["y"])))
    pts = [p for _, _, ps in lines for p in ps]
    if not pts:
        return "<div class='memscope-meta'>no samples</div>"
    t_end = max(p[0] for p in pts) or 1.0
    y_max = max(p[1] for p in pts) or 1.0
    paths = "".join(
        f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='"
        + " ".join(f"{_W * t / t_end:.1f},{_H - _H * y / y_max:.1f}" for t, y in ps)
        + "'/>"
        for _, color, ps in lines
    )
    legend = " · ".join(f"<span style='color:{c}'>■</span> {n}" for n, c, _ in lines)
    return (
        f"<svg viewBox='0 0 {_W} {_H}' preserveAspectRatio='none' style='width:100%;max-width:{_W}px;"
        f"height:{_H}px;border:1px solid #ddd;background:#fff'>{paths}</svg>"
        f"<div style='font:11px sans-serif;color:#555'>{legend} · 0 to {fmt_elapsed(t_end)} · "
        f"top {fmt_bytes(y_max)}</div>"
    )


def static_html(
    key: str, status: str, card: str, table: str, snap: Mapping[str, Any], why: str = "", stop: str = ""
) -> str:
    """The static copy of dashboard ``key``: its pieces as HTML already escaped by their makers. ``why`` (plain
    text) says why the live dashboard is not drawn and what fixes it; ``stop`` (plain text) how to stop a run that
    goes on. Where the live view cannot be drawn (a widget frontend that cannot draw this kernel's ipywidgets, no
    widget manager, nbconvert), this copy is the cell's live text status: the kernel updates it in place."""
    from html import escape

    # The live view is drawn when its VBox is (ipywidgets 7 and 8 give it "widget-vbox"): the widget manager's error
    # box carries the view's classes too, not that one (JupyterLab 4 meeting an ipywidgets 7 kernel: "controls
    # ^1.5.0 is not registered"). Classes only: a :has() inside :has() is invalid CSS (drops the whole rule), and a
    # body:has() with combinators makes the browser re-check it at every change of the page.
    live = f".memscope-live-{key}.widget-vbox"
    copy = f"memscope-static-{key}"
    style = (
        f"<style>body:has({live}) .jp-OutputArea-child:has(.{copy}), body:has({live}) .{copy} {{display:none}}"
        f" body:not(:has({live})) .jp-OutputArea-child:has(.jupyter-widgets):has(+ .jp-OutputArea-child .{copy})"
        f" {{display:none}}</style>"
    )
    head = (
        escape(why)
        if why
        else "memscope: a static copy of the dashboard as it last was (the live one needs the kernel that made it)"
    )
    stop_line = (
        f"<div class='memscope-text-stop' style='font:12px monospace;margin:2px 0'>{escape(stop)}</div>" if stop else ""
    )
    return (
        f"{style}<div class='memscope-static {copy}'>"
        f"<div class='memscope-why' style='font:11px sans-serif;color:#777'>{head}</div>"
        f"{status}{stop_line}{card}{memory_svg(snap)}{table}</div>"
    )
