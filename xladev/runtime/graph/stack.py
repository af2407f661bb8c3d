"""The Python stack: the frames of a barrier or transfer, and which of them are the user's code.

Call sites use `stack.capture_frames()` (the module attribute, not an imported copy), so a benchmark
can time every frame capture by replacing that one function.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

import torch

from xladev import graphdiff
from xladev.events import Frame

# This file is xladev/runtime/graph/stack.py: three levels up is the package.
_XLADEV_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

_normalized: dict[str, str] = {}


def capture_frames(limit: int = 64) -> tuple[Frame, ...]:
    """The Python stack of the caller, innermost first.

    On autograd's device thread, which has no frame of the user's, the stack goes on with the frames of
    the thread that called `backward()` (`backward_caller`), as if the backward pass were called from there:
    its line is the user's, never a frame of xladev or torch (a fallback op or a torch.compile backward graph).
    """
    frames = []
    frame = sys._getframe(1)
    while frame is not None and len(frames) < limit:
        frames.append(Frame(frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    if threading.get_ident() != _MAIN_THREAD and not any(not is_library_frame(f.file) for f in frames):
        caller = backward_caller()
        while caller is not None and len(frames) < limit:
            frames.append(Frame(caller.f_code.co_name, caller.f_code.co_filename, caller.f_lineno))
            caller = caller.f_back
    return tuple(frames)


# torch.autograd's last Python frame before its C++ engine runs the backward pass, in the calling thread.
_BACKWARD_ENTRY = "_engine_run_backward"
_MAIN_THREAD = threading.main_thread().ident


def backward_caller():
    """The innermost frame of another thread waiting for a backward pass (`loss.backward()`,
    `torch.autograd.grad`) to finish, or None.

    Backward ops of a device run on autograd's device thread, whose stack holds only torch's and xladev's frames;
    the thread that called backward waits in `_engine_run_backward` meanwhile. Only asked when the current stack
    has no user frame, so it costs nothing on the common path.
    """
    me = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        if ident != me and frame.f_code.co_name == _BACKWARD_ENTRY:
            return frame
    return None


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
    """`fn@file.py:LINE` of the innermost user frame (`user_frame`), or None."""
    frame = _user_frame_from(sys._getframe(1))
    if frame is None:
        return None
    return f"{frame.f_code.co_name}@{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def op_location() -> str | None:
    """`fn@file.py:LINE` of the user's line recording an op, with `` (backward)`` when autograd's backward pass
    records it (its line is then the `backward()` call's): which op's constant changed, in a recompilation."""
    location = user_location()
    if location is not None and torch._C._current_graph_task_id() != -1:
        location += graphdiff.BACKWARD_SUFFIX
    return location


def user_frame():
    """The innermost frame of the user's code (outside xladev, torch and libraries), or None; on autograd's device
    thread, the user's frame of the thread that called backward (see `capture_frames`)."""
    return _user_frame_from(sys._getframe(1))


def _user_frame_from(frame):
    start = frame
    while frame is not None and is_library_frame(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None and start is not None and threading.get_ident() != _MAIN_THREAD:
        frame = backward_caller()
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
