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


def _phase(name: str, state: str) -> None:
    # The hot path of a phase around every step: two lookups, then the agent's own function (agent/phases.py
    # coalesces the step's end and the next step's start there, sending nothing).
    agent = sys.modules.get("_memscope_agent")
    if agent is None:
        return
    try:
        fn = getattr(agent.phases, "phase_" + state, None)
        if fn is not None:
            fn(name)
        else:  # an agent of an older memscope
            agent.phases.send("phase", name=name, state=state)
    except Exception:
        pass


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
        _phase(self.name, "start")
        return self

    def __exit__(self, *exc: object) -> None:
        _phase(self.name, "end")

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(self.name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def mark(text: str) -> None:
    """A point in time worth seeing on the chart: "checkpoint saved", "lr dropped"."""
    _send("mark", text=str(text)[:500])  # the agent cuts at MARK_CHARS too, for any caller
