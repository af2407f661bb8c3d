"""The name of the graphs being run: a compiled region's (`xladev.compile(name=...)`), or none.

PyTorch/XLA keeps one current graph name for the process and prints it as "Graph Name" in its debug
analysis; compile and execute events carry it the same way. It is a label only: it is not part of a
graph's key, so the same graph run under two names is one executable.
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_current: str | None = None


def current() -> str | None:
    """The name graphs run under now, or None."""
    return _current


@contextlib.contextmanager
def naming(name: str | None):
    """Runs the block with `name` as the current graph name (None: no name); restores the previous one.

    Args:
      name: the name.
    """
    global _current
    with _lock:
        saved, _current = _current, name
    try:
        yield
    finally:
        with _lock:
            _current = saved
