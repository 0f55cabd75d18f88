"""memscope's exceptions, each meant to be shown as its one-line message (standard library only, layer 0)."""

from __future__ import annotations


class LaunchError(Exception):
    """Bad input: the message is one line meant for the user."""


class CensusError(Exception):
    """A census could not be taken; the message says why, in one line."""


class StacksError(Exception):
    """Stacks could not be taken; the message says why, in one line."""


class ScaleneError(Exception):
    """A Scalene snapshot could not be taken; the message says why, in one line."""


# How to start a run that Scalene can profile: said by the session when a snapshot is asked of a run not under
# Scalene, and by the dashboard's button (which never reaches into the session for it).
SCALENE_HOW_TO = (
    "start the run under Scalene: %memscope --scalene train.py (memscope run --scalene train.py, "
    "or memscope.run(cmd, scalene=True)); --scalene=memory adds memory figures"
)


class ClusterError(Exception):
    """Prometheus cannot be reached, or holds no memscope data: the message says which, in one line."""
