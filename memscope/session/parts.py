"""What the start and the end of a run take: its state and its parts, typed (``run.Run`` is one such handle)."""

from __future__ import annotations

from typing import Protocol

from .. import wiring
from .agents import Agents
from .sampling import Sampler
from .scalene import ScaleneSession
from .stacks import StackTaker
from .state import RunState


class RunParts(Protocol):
    """A run as ``launch`` and ``finish`` see it: the shared state, each part, and the exporters attached."""

    state: RunState
    agents: Agents
    sampler: Sampler
    stack_taker: StackTaker
    scalene: ScaleneSession | None
    attachments: dict[str, wiring.Attachment]
    attaching: list[wiring.Attachment]  # made at the run's creation, started first thing at the launch
