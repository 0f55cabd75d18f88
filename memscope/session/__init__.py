"""Layer 4: a run under memscope. ``Run`` is the public handle (``run.py``); its options and their checks, sampling
loops, agents' wiring, end and Scalene side are the modules beside it."""

from .live import Snapshot
from .options import Options
from .run import Run, started_here

__all__ = ["Options", "Run", "Snapshot", "started_here"]
