"""Finding a test's own source lines, so tests can assert the line numbers xladev reports."""

from __future__ import annotations


def line_of(path: str, marker: str) -> int:
    """The number of the first line of `path` holding `marker`, skipping lines that call `line_of`.

    Raises:
      AssertionError: no such line (the marker comment was edited away).
    """
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            if marker in line and "line_of(" not in line:
                return number
    raise AssertionError(f"no line of {path} holds {marker!r}")
