"""`xladev tui`: a live terminal view of an xladev run, from its event log (docs/tui.md).

- `tui.run_model`: the state (steps, compiles by site, recompilation alerts, transfer hot spots,
  fallbacks, graphs, counters, compiles in progress, run state) fed by event-log records, copied
  into the immutable views of `tui.run_view`; no Textual import.
- `tui.diagnosis`: the report's findings and time breakdown of the records read so far, from the
  report's own reader and rules (`xladev.report`); no Textual import.
- `tui.sources`: where records come from: a growing file, a child process, a fixture;
  `tui.job_output`: the child's output kept next to its log.
- `tui.app`: the Textual app; `tui.widgets`: its screen regions; `tui.layout_fix`: a fix for
  Textual's layout (a widget's new content always gets its new size, even on a loaded machine).

This package never imports xladev's runtime (nor torch or jax): it reads files and pipes only.
"""

from xladev_tui.run_model import RunModel, RunView
from xladev.schema.records import NotAnEventLog

__all__ = ["RunModel", "RunView", "NotAnEventLog", "run_app"]


def run_app(source, **kwargs):
    """Runs the app on a source in this terminal; returns the app's return value."""
    from xladev_tui.app import XladevTUI

    app = XladevTUI(source, **kwargs)
    return app.run(), app
