"""The Python stack: the frames of a barrier or transfer, and which of them are the user's code.

Call sites use `stack.capture_frames()` (the module attribute, not an imported copy), so a benchmark
can time every frame capture by replacing that one function.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from xladev.events import Frame

_XLADEV_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

_normalized: dict[str, str] = {}


def capture_frames(limit: int = 64) -> tuple[Frame, ...]:
    """The Python stack of the caller, innermost first."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        frames.append(Frame(frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


def is_library_frame(filename: str) -> bool:
    """True for frames of xladev, torch, the standard library and site-packages (not the user's code)."""
    # Module paths may hold `..` (a sys.path entry like `examples/..`): compare normalised paths.
    filename = _normalized.get(filename) or _normalized.setdefault(filename, os.path.abspath(filename))
    return (
        filename.startswith(_XLADEV_DIR)
        or filename.startswith(_TORCH_DIR)
        or "site-packages" in filename
        or "dist-packages" in filename
        or filename.startswith(sys.prefix + os.sep + "lib")
        or filename.startswith(sys.base_prefix + os.sep + "lib")
        or filename.startswith("<frozen")
    )


def user_location() -> str | None:
    """`fn@file.py:LINE` of the innermost user frame, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_library_frame(filename):
            return f"{frame.f_code.co_name}@{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def user_frame():
    """The innermost frame of the user's code (outside xladev, torch and libraries), or None."""
    frame = sys._getframe(1)
    while frame is not None and is_library_frame(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warns at the innermost user line, as torch's own warnings point there (or here, with no user frame:
    a backward op on autograd's device thread).

    Args:
      message: the warning's text.
      category: its class.
    """
    frame = user_frame()
    if frame is not None:
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno)
    else:
        warnings.warn(message, category, stacklevel=2)
