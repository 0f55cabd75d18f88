"""Where the upper layers plug into the lower ones, so that imports only ever go down.

A run (``session``) must not import the exporters or the views that watch it, and a data object (``analysis``)
must not import the view that draws it. Instead the top of the package (``memscope/__init__``, which Python runs
before any submodule) registers here what the lower layers call: the attachments a run starts with (the
Prometheus exporter when its options ask for one), the HTML renderers of data objects shown in a notebook, and
the views of objects displayed there (a ``Run`` shows its live dashboard).
Standard library only (layer 0).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class Attachment(Protocol):
    """Something that watches a run from outside (an exporter): started just before the run's command."""

    def start(self) -> None:
        """Attach (subscribe, listen); raise ``errors.LaunchError`` (one line) to refuse the run."""

    def close(self) -> None:
        """Let go at once (the run could not start)."""


# Called with each new Run (after its options are checked): an Attachment, or None when the run wants none.
# Raising errors.LaunchError refuses the run before anything starts.
RUN_ATTACHMENTS: list[Callable[[Any], Attachment | None]] = []

# Type name -> its HTML (a notebook's ``_repr_html_``), for data objects that lower layers define.
HTML_RENDERERS: dict[str, Callable[[Any], str]] = {}


def html_of(obj: Any) -> str | None:
    """``obj``'s HTML from the renderer registered for its type, None when none is (plain text is shown)."""
    render = HTML_RENDERERS.get(type(obj).__name__)
    return render(obj) if render is not None else None


# Type name -> its notebook view as a mime bundle (IPython's ``_repr_mimebundle_``), or None where the view cannot
# be drawn (a terminal IPython): the object's plain repr is shown then.
MIMEBUNDLE_RENDERERS: dict[str, Callable[[Any], dict[str, Any] | None]] = {}


def mimebundle_of(obj: Any) -> dict[str, Any] | None:
    """``obj``'s view from the renderer registered for its type, None when none is or it cannot be drawn here."""
    render = MIMEBUNDLE_RENDERERS.get(type(obj).__name__)
    return render(obj) if render is not None else None
