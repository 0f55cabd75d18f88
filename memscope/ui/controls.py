"""The dashboard's buttons: Stop, Kill, Scalene snapshot, Tensor census.

An anywidget rather than ipywidgets Buttons because a click must show its effect in the browser at once:
the JS relabels the button ("stopping…") before the kernel has seen anything, and if the kernel does not
acknowledge within 700 ms it says "queued: the kernel is busy" (widget messages wait while another cell runs,
except on kernels with comm subshells). Works with anywidget 0.9 (Colab) and newer.
"""
from __future__ import annotations

from typing import Any, Callable

import anywidget
import traitlets

_ESM = r"""
const ACTIONS = [
  ["stop", "Stop", "stopping…"], ["kill", "Kill", "killing…"],
  ["scalene", "Scalene snapshot", "profiling…"], ["census", "Tensor census", "counting…"],
];
function render({ model, el }) {
  const bar = document.createElement("div");
  bar.className = "memscope-controls";
  bar.style.cssText = "display:flex;gap:6px;align-items:center;flex-wrap:wrap;margin:4px 0";
  const note = document.createElement("span");
  note.className = "memscope-controls-note";
  note.style.cssText = "font-size:12px;color:#8a6d3b;margin-left:6px";
  const buttons = {};
  let timer = null;
  const paint = () => {
    const disabled = model.get("disabled") || [];
    for (const [key, label] of ACTIONS) {
      const b = buttons[key];
      b.disabled = disabled.includes(key);
      b.textContent = (model.get("labels") || {})[key] || label;
      b.title = (model.get("tips") || {})[key] || "";
    }
    note.textContent = model.get("note") || "";
  };
  for (const [key, label, busy] of ACTIONS) {
    const b = document.createElement("button");
    b.className = "memscope-btn memscope-btn-" + key;
    b.style.cssText = "padding:3px 10px;border:1px solid #999;border-radius:3px;background:#f6f6f6;cursor:pointer";
    b.textContent = label;
    b.addEventListener("click", () => {
      b.textContent = busy;                       // at once, in the browser
      note.textContent = "";
      model.send({ action: key, clicks: Date.now() });
      clearTimeout(timer);
      timer = setTimeout(() => {
        note.textContent = "queued: the kernel is busy; it acts when the running cell finishes";
      }, 700);
    });
    buttons[key] = b;
    bar.appendChild(b);
  }
  bar.appendChild(note);
  model.on("change:ack", () => { clearTimeout(timer); paint(); });
  model.on("change:labels", paint);
  model.on("change:disabled", paint);
  model.on("change:note", paint);
  paint();
  el.appendChild(bar);
}
export default { render };
"""


class Controls(anywidget.AnyWidget):
    _esm = _ESM
    ack = traitlets.Int(0).tag(sync=True)              # bumped by the kernel for every click it handled
    labels = traitlets.Dict({}).tag(sync=True)         # action -> label override ("stopping…")
    tips = traitlets.Dict({}).tag(sync=True)
    disabled = traitlets.List([]).tag(sync=True)
    note = traitlets.Unicode("").tag(sync=True)

    def __init__(self, on_action: Callable[[str], str | None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_action = on_action
        self.on_msg(self._handle)

    def _handle(self, _widget: Any, content: Any, _buffers: Any) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        note = ""
        if action:
            try:
                note = self._on_action(str(action)) or ""
            except Exception as exc:  # a failing action must not break the dashboard
                note = f"{action} failed: {exc}"
        self.note = note
        self.ack += 1
