"""Which frames to show, and which one is the user's."""

from __future__ import annotations

import os
import sys
import sysconfig

from xladev.events import Frame

_XLADEV = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_STDLIB = {os.path.abspath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])}


def is_xladev(frame: Frame) -> bool:
    return os.path.abspath(frame.file).startswith(_XLADEV)


def is_user(frame: Frame) -> bool:
    """Outside the standard library, site-packages, torch's and xladev's own code."""
    path = os.path.abspath(frame.file)
    if path.startswith(_XLADEV) or frame.file.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not any(path.startswith(root) for root in _STDLIB)


def first_user_index(frames) -> int | None:
    for i, frame in enumerate(frames or ()):
        if is_user(frame):
            return i
    return None


def shown_frames(frames) -> list[Frame]:
    """Frames from the xladev API call the user made (if any) outward, innermost first."""
    frames = list(frames or ())
    user = first_user_index(frames)
    if user is None:
        return frames
    start = user
    # Show the public xladev call that triggered the sync (mark_step, item...), as PyTorch/XLA does.
    while start > 0 and not is_xladev(frames[start - 1]):
        start -= 1
    if start > 0:
        start -= 1
    return frames[start:]


def site_of(frames) -> str:
    """`file.py:LINE (function)` of the first user frame: the trigger site."""
    frames = list(frames or ())
    index = first_user_index(frames)
    frame = frames[index] if index is not None else (frames[-1] if frames else None)
    if frame is None:
        return "<unknown>"
    return f"{frame.file}:{frame.line} ({frame.name})"


def short_site(site: str) -> str:
    path, _, rest = site.partition(":")
    return f"{os.path.basename(path)}:{rest}"
