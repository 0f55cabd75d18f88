"""``memscope.phase`` and ``memscope.mark``: what the user's training code calls to label its own time.

Both are no-ops when the code is not running under memscope, so they can stay in a training script for good.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _send(kind: str, **data: Any) -> bool:
    agent = sys.modules.get("_memscope_agent")  # loaded by memscope's sitecustomize, only under memscope
    if agent is None:
        return False
    try:
        # The agent coalesces and rate-limits (agent/phases.manual); an agent of an older memscope only sends.
        manual = getattr(agent.phases, "manual", None)
        return bool(manual(kind, **data) if manual is not None else agent.phases.send(kind, **data))
    except Exception:
        return False


_agent_fns: tuple[Any, Any, Any] = (None, None, None)  # (agent module, its phase_start, its phase_end)


def _phase_fns() -> tuple[Any, Any, Any]:
    # The hot path of a phase around every step: one lookup, then the agent's own functions (agent/phases.py
    # coalesces the step's end and the next step's start there, sending nothing).
    global _agent_fns
    agent = sys.modules.get("_memscope_agent")  # loaded by memscope's sitecustomize, only under memscope
    fns = _agent_fns
    if fns[0] is not agent:
        ph = getattr(agent, "phases", None)
        fns = _agent_fns = (agent, getattr(ph, "phase_start", None), getattr(ph, "phase_end", None))
    return fns


class phase:
    """Label a stretch of the run, as a context manager or a decorator:

    with memscope.phase("validation"):
        evaluate(model)

    @memscope.phase("validation")
    def evaluate(model): ...
    """

    def __init__(self, name: str) -> None:
        self.name = str(name)

    def __enter__(self) -> "phase":
        agent, start, _ = _phase_fns()
        if start is not None:
            try:
                start(self.name)
            except Exception:
                pass
        elif agent is not None:  # an agent of an older memscope
            _send("phase", name=self.name, state="start")
        return self

    def __exit__(self, *exc: object) -> None:
        agent, _, end = _phase_fns()
        if end is not None:
            try:
                end(self.name)
            except Exception:
                pass
        elif agent is not None:
            _send("phase", name=self.name, state="end")

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(self.name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def mark(text: str) -> None:
    """A point in time worth seeing on the chart: "checkpoint saved", "lr dropped"."""
    _send("mark", text=str(text)[:500])  # the agent cuts at MARK_CHARS too, for any caller
