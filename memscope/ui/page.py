"""The standalone page: one self-contained HTML file (BokehJS inline: no CDN, no server) around a Bokeh root.

The run's report (``report.RunReport``), the CUDA snapshot's page (``snapshot_view.SnapshotPage``) and the job view
(``cluster.JobPage``) are each a ``Reporter``: they say what the page holds (``Page``), this module assembles and
writes it, with the CSS and the template they share (as memray's reporters share one protocol).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .. import outfile

CSS = """
<style>
  body { font: 14px/1.4 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
         padding: 12px 20px 40px; max-width: 1400px; margin: 0 auto; }
  h1 { font-size: 18px; margin: 4px 0; }
  h2 { font-size: 15px; margin: 18px 0 6px; border-bottom: 1px solid #eee; padding-bottom: 2px; }
  h3 { font-size: 13px; margin: 14px 0 4px; }
  .memscope-cmd { font: 12px monospace; color: #444; word-break: break-all; white-space: pre-wrap; }
  .memscope-meta { font-size: 12px; color: #666; }
  .memscope-status { margin: 6px 0; }
  .memscope-procs td, .memscope-procs th { padding: 1px 10px 1px 0; vertical-align: top; }
  .memscope-output { max-height: 560px !important; }
  .memscope-chart { min-height: 380px; }
</style>
"""

# Bokeh's file template with the page's own parts around the roots; the output tails open scrolled to their end.
TEMPLATE = """
{% from macros import embed %}
{% block postamble %}{{ page_css }}{% endblock %}
{% block contents %}
{{ page_top }}
<div class="{{ roots_class }}">
{% for root in roots %}{{ embed(root) }}{% endfor %}
</div>
{{ page_bottom }}
<script>
  for (const el of document.querySelectorAll(".memscope-output")) el.scrollTop = el.scrollHeight;
</script>
{% endblock %}
"""


@dataclass
class Page:
    """What one standalone page holds: HTML above and below a Bokeh root (a figure or a layout)."""

    title: str
    top: str
    root: Any  # a Bokeh model (bokeh has no type information for mypy)
    bottom: str = ""
    css: str = ""  # the page's own rules, after the shared ones
    roots_class: str = "memscope-chart"  # the box around the root ("memscope-chart" keeps room for a chart)


class Reporter(Protocol):
    """Something shown as a standalone page."""

    def page(self) -> Page:
        """The page's parts, built from what the reporter was given."""
        ...


def render(reporter: Reporter) -> str:
    """The reporter's page as one self-contained HTML document."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    p = reporter.page()
    css = CSS + (f"<style>{p.css}</style>" if p.css else "")
    html: str = file_html(
        p.root,
        resources=INLINE,
        title=p.title,
        template=TEMPLATE,
        template_variables={"page_css": css, "page_top": p.top, "page_bottom": p.bottom, "roots_class": p.roots_class},
    )
    return html


def write(reporter: Reporter, out_path: str) -> str:
    """Write the reporter's page to ``out_path`` as ``> out_path`` would (a FIFO or /dev/stdout is written to);
    returns ``out_path``."""
    return outfile.write_text(out_path, render(reporter))
