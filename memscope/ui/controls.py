"""The dashboard's buttons: Stop, Kill, Scalene snapshot, Tensor census, Stacks.

An anywidget rather than ipywidgets Buttons because a click must show its effect in the browser at once: the JS
marks the button "sent…" before the kernel has seen anything, and if the kernel has not acknowledged the click
within 700 ms it says "queued" and how to act now. Works with anywidget 0.9 (Colab) and newer.

While another cell runs, a click still acts at once where the frontend sends comm messages over a kernel subshell
(JupyterLab 4.6 and Notebook 7.6 do by default, one subshell per comm target, for kernels whose kernel_info lists
"kernel subshells", as ipykernel 7's does). ipykernel 7.4 then reroutes each comm message to the subshell that last *sent* on that comm, so that a
frontend's reply reaches a cell awaiting it; the dashboard's updates go out from the main shell, which would send
every click back to the busy main shell. These buttons await no reply, so their comm keeps the frontend's choice
(:func:`keep_frontend_subshell`). Elsewhere (Colab, VS Code, an older ipykernel) the click waits for the busy cell,
and the button says so.
"""

from __future__ import annotations

from typing import Any, Callable

import anywidget
import traitlets

_ESM = r"""
const ACTIONS = [
  ["stop", "Stop"], ["kill", "Kill"], ["scalene", "Scalene snapshot"], ["census", "Tensor census"],
  ["stacks", "Stacks"],
];
const QUEUED = {   // one line each: what will happen, and how to act now
  stop: "Stop is queued behind the running cell; to stop now, interrupt that cell (■).",
  kill: "Kill is queued behind the running cell; to kill now, interrupt that cell (■).",
  scalene: "Queued behind the running cell: the snapshot starts when that cell ends.",
  census: "Queued behind the running cell: the census starts when that cell ends.",
  stacks: "Queued behind the running cell: the stacks are taken when that cell ends.",
};
function render({ model, el }) {
  const bar = document.createElement("div");
  bar.className = "memscope-controls";
  bar.style.cssText = "display:flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 0";
  const note = document.createElement("span");
  note.className = "memscope-controls-note";
  note.style.cssText = "font-size:12px;color:#8a6d3b;margin-left:6px";
  const buttons = {};
  const pending = {};   // action -> the click the kernel has not acknowledged yet (one per button)
  const queued = {};    // action -> true once that click waited past 700 ms
  const paint = () => {
    const disabled = model.get("disabled") || [];
    const labels = model.get("labels") || {};
    let text = model.get("note") || "";
    for (const [key, label] of ACTIONS) {
      const b = buttons[key];
      b.disabled = disabled.includes(key);
      // Greyed where the page's own CSS does not grey a disabled button (classic Notebook 6.5).
      b.style.opacity = b.disabled ? "0.45" : "";
      b.style.cursor = b.disabled ? "default" : "pointer";
      if (b.disabled) { delete pending[key]; delete queued[key]; }
      b.textContent = queued[key] ? label + ": queued" : pending[key] ? label + ": sent…" : labels[key] || label;
      b.title = (model.get("tips") || {})[key] || "";
      if (queued[key]) text = QUEUED[key];
    }
    note.textContent = text;
  };
  for (const [key, label] of ACTIONS) {
    const b = document.createElement("button");
    b.className = "memscope-btn memscope-btn-" + key;
    b.style.cssText = "padding:3px 10px;border:1px solid #999;border-radius:3px;background:#f6f6f6;cursor:pointer";
    b.textContent = label;
    b.addEventListener("click", () => {
      if (pending[key]) return;                   // one request per button until the kernel answers it
      const id = Date.now();
      pending[key] = id;
      model.send({ action: key, clicks: id });
      paint();                                    // at once, in the browser
      setTimeout(() => { if (pending[key] === id) { queued[key] = true; paint(); } }, 700);
    });
    buttons[key] = b;
    bar.appendChild(b);
  }
  bar.appendChild(note);
  model.on("change:acked", () => {
    const a = model.get("acked") || {};
    for (const key of Object.keys(a)) {
      if (pending[key] !== undefined && a[key] >= pending[key]) { delete pending[key]; delete queued[key]; }
    }
    paint();
  });
  for (const t of ["labels", "disabled", "note", "tips"]) model.on("change:" + t, paint);
  paint();
  el.appendChild(bar);
}
export default { render };
"""


def keep_frontend_subshell(comm: Any) -> bool:
    """Let this comm's incoming messages run on the subshell the frontend sent them over (see the module's
    docstring); returns whether the kernel has subshell routing to adjust. A no-op on kernels without it."""
    if comm is None or not callable(getattr(comm, "_reply_subshell_for", None)):
        return False
    comm._reply_subshell_for = lambda _data, default: default
    return True


class Controls(anywidget.AnyWidget):
    """The dashboard's buttons (stop, kill, census, Scalene snapshot) as one small widget."""

    _esm = _ESM
    ack = traitlets.Int(0).tag(sync=True)  # bumped by the kernel for every click it handled
    acked = traitlets.Dict({}).tag(sync=True)  # action -> the last click id the kernel handled
    labels = traitlets.Dict({}).tag(sync=True)  # action -> label override ("stopping…")
    tips = traitlets.Dict({}).tag(sync=True)
    disabled: traitlets.List[str] = traitlets.List([]).tag(sync=True)  # the actions greyed out
    note = traitlets.Unicode("").tag(sync=True)

    def __init__(self, on_action: Callable[[str], str | None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_action = on_action
        self.on_msg(self._handle)
        self.subshell_routing = keep_frontend_subshell(getattr(self, "comm", None))

    def _handle(self, _widget: Any, content: Any, _buffers: Any) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        if not action:
            return
        action = str(action)
        try:
            note = self._on_action(action) or ""
        except Exception as exc:  # a failing action must not break the dashboard
            note = f"{action} failed: {exc}"
        self.note = note
        click = content.get("clicks")
        if isinstance(click, (int, float)):
            self.acked = {**self.acked, action: click}
        self.ack += 1
