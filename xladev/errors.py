"""The one base of every error and warning xladev raises, so that a user can catch all of ours at once.

    try:
        train()
    except xladev.XladevError as err:
        ...

Each concrete error also keeps the built-in base that code already catches (`RuntimeError` for a failed
compile, `ValueError` for a bad flag value, `ImportError` for a refused `torch_xla` module...), so
adding this base changes no existing `except` clause. This module imports nothing: every layer, from the
runtime to the report and the TUI, may subclass it.
"""

from __future__ import annotations

__all__ = ["UsageError", "XladevError", "XladevWarning"]


class XladevError(Exception):
    """Base of every exception xladev defines. Catch it to catch any of ours."""


class XladevWarning(UserWarning):
    """Base of every warning category xladev defines, for `warnings.filterwarnings(..., XladevWarning)`."""


class UsageError(XladevError):
    """A mistake on an `xladev` command line. The CLI prints its message as one line and exits with status 2."""
