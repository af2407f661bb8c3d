"""`xladev report`: read PyTorch/XLA (and xladev) metrics reports and debug logs, and diagnose them.

Typical use::

    from xladev.report import load
    report = load(["metrics.txt", "debug.txt"])
    report.steps          # per-step series (pandas DataFrame)
    report.findings       # what is wrong, with evidence and a fix

This package never imports torch, jax or the xladev runtime: a report can be made on a machine
without the run. The formatters in `xladev.schema.units` are shared with the runtime's metrics.
"""

from xladev.report.loader import Report, load
from xladev.report.model import NoCompleteRecordError, ParseWarning, UnreadableInputError
from xladev.report import eventlog_input  # noqa: E402,F401  (registers the event-log reader)

__all__ = ["Report", "load", "NoCompleteRecordError", "ParseWarning", "UnreadableInputError"]
