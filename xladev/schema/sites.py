"""Trigger sites: which Python frame is the user's, and how a site is written and shortened.

A site is `file:line (function)`, the first frame outside xladev, torch, site-packages and the
standard library. Frames are anything with `name`, `file` and `line` (`xladev.events.Frame`).
"""

from __future__ import annotations

import os
import sysconfig

UNKNOWN_SITE = "<unknown>"

# xladev's own package directory: frames inside it are the API the user called, never the site.
_XLADEV = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple({os.path.abspath(p) + os.sep
                 for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])})


def is_xladev(frame) -> bool:
    """True for a frame in xladev's own code."""
    return os.path.abspath(frame.file).startswith(_XLADEV)


def is_user(frame) -> bool:
    """True for a frame outside the standard library, site-packages, and xladev's own code."""
    return is_user_file(frame.file)


def is_user_file(file: str) -> bool:
    """True for a source file outside the standard library, site-packages, and xladev's own code."""
    if file.startswith("<"):
        return False
    path = os.path.abspath(file)
    if path.startswith(_XLADEV) or "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_STDLIB)


def first_user_index(frames) -> int | None:
    """Index of the first (innermost) user frame, or None."""
    for i, frame in enumerate(frames or ()):
        if is_user(frame):
            return i
    return None


def user_frame(frames):
    """The first user frame; else the outermost frame when it is code run from a string (``python -c``, exec,
    a notebook cell: ``<string>``...); else None, never a frame of xladev, torch or a library."""
    frames = list(frames or ())
    index = first_user_index(frames)
    if index is not None:
        return frames[index]
    if frames and frames[-1].file.startswith("<") and not frames[-1].file.startswith("<frozen"):
        return frames[-1]
    return None


def shown_frames(frames) -> list:
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


def site_text(frame) -> str:
    """`file:line (function)` of one frame."""
    return f"{frame.file}:{frame.line} ({frame.name})"


def site_of(frames) -> str:
    """`file:line (function)` of the first user frame: the trigger site; `<unknown>` without frames."""
    frame = user_frame(frames)
    return UNKNOWN_SITE if frame is None else site_text(frame)


def join_site(where: str, function: str) -> str:
    """(`/a/train.py:12`, `step`) -> `/a/train.py:12 (step)`, as records hold a site: `split_site`'s inverse; a
    site without a function, or none (""), stays as it is."""
    return f"{where} ({function})" if where and function else where


def split_site(site: str | None) -> tuple[str, str]:
    """`/a/train.py:12 (step)` -> (`/a/train.py:12`, `step`); a site without a function keeps ``""``."""
    if not site:
        return "", ""
    where, sep, function = site.rpartition(" (")
    if not sep or not function.endswith(")"):
        return site, ""
    return where, function[:-1]


def short_site(site: str | None) -> str:
    """`/a/b/train.py:12 (step)` -> `train.py:12 (step)`; also for `C:\\a\\train.py:12` and `file:line`."""
    if not site:
        return UNKNOWN_SITE
    where, function = split_site(site)
    path, sep, line = where.rpartition(":")
    if not sep or not line.isdigit():
        path, line = where, ""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    text = f"{name}:{line}" if line else name
    return f"{text} ({function})" if function else text
