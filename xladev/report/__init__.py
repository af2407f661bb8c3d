"""`xladev report`: read PyTorch/XLA (and xladev) metrics reports and debug logs, and diagnose them.

Typical use::

    from xladev.report import load
    report = load(["metrics.txt", "debug.txt"])
    report.steps          # per-step series (pandas DataFrame)
    report.findings       # what is wrong, with evidence and a fix

This package never imports torch, jax or the xladev runtime: a report can be made on a machine
without the run. The formatters in `xladev.schema.units` are shared with the runtime's metrics.
"""

from xladev.report.model import NoCompleteRecordError, ParseWarning, UnreadableInputError

__all__ = ["Report", "load", "NoCompleteRecordError", "ParseWarning", "UnreadableInputError"]


def __getattr__(name: str):
    # `Report` and `load` bring pandas (about a second): imported on first use, so that the readers (the TUI's live
    # fold of an event log) load without it.
    if name in ("Report", "load"):
        from xladev.report import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'xladev.report' has no attribute {name!r}")
