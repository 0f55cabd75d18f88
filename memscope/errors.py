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


class ClusterError(Exception):
    """Prometheus cannot be reached, or holds no memscope data: the message says which, in one line."""
