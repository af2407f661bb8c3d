"""The checkpoint directories of a `CheckpointManager`: written under a temporary name, committed by an atomic
rename, so that a process killed at any moment leaves every committed checkpoint whole and never one that
looks complete but is not.

    BASE/.tmp-30/          being written (every process writes its files here)
    BASE/30/               committed: renamed from .tmp-30 once `.manager_metadata` is in it
    BASE/30/.manager_metadata   the completion marker (JSON: step, time, world size), written last

- A checkpoint counts only under its step's name with a readable marker; a `.tmp-N` is never read.
- Saving a step that exists moves the old one aside (`.old-N`) for the moment of the swap; if the process dies
  between the two renames, the next manager on the directory puts the old one back.
- Deleting (keep-last-N) renames to `.del-N-...` first, so that a half-deleted directory is never under a
  step's name.
- The next manager on the directory (process 0) removes what a killed process left (`.tmp-*`, `.del-*`),
  saying so.
Only process 0 renames or deletes; the others write into the temporary directory.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import uuid
from pathlib import Path

from xladev.events import ending

MARKER = ".manager_metadata"  # PyTorch/XLA's file name for it (a pickle there; JSON here)
_FORMAT = "xladev checkpoint"
_TMP, _OLD, _DEL = ".tmp-", ".old-", ".del-"


@dataclasses.dataclass(frozen=True)
class Committed:
    """A committed checkpoint.

    Attributes:
      step: the training step it holds.
      ts: when it was committed (ISO 8601, local time): keep-last-N drops the oldest by this.
      world_size: how many processes wrote it.
    """

    step: int
    ts: str
    world_size: int


def staging(base: Path, step: int) -> Path:
    """The temporary directory the checkpoint of `step` is written into."""
    return base / f"{_TMP}{step}"


def final(base: Path, step: int) -> Path:
    """The committed checkpoint of `step`."""
    return base / str(step)


def prepare(base: Path, step: int) -> Path:
    """Makes an empty temporary directory for `step` (what an earlier, killed save left there goes)."""
    path = staging(base, step)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def commit(base: Path, step: int, world_size: int) -> Committed:
    """Commits the written temporary directory of `step`: the marker goes in last, then an atomic rename.

    Returns:
      The committed checkpoint.
    """
    path = staging(base, step)
    done = Committed(step, datetime.datetime.now().isoformat(timespec="microseconds"), world_size)
    _write_atomically(path / MARKER, json.dumps({"format": _FORMAT, "version": 1, **dataclasses.asdict(done)}))
    _fsync_dir(path)
    target = final(base, step)
    if target.exists():  # the step is saved again: the old one steps aside for the moment of the swap
        old = base / f"{_OLD}{step}"
        if old.exists():
            shutil.rmtree(old)
        os.rename(target, old)
        os.rename(path, target)
        _fsync_dir(base)
        shutil.rmtree(old)
    else:
        os.rename(path, target)
        _fsync_dir(base)
    return done


def delete(base: Path, step: int) -> None:
    """Deletes the committed checkpoint of `step`, first taking it from under its step's name."""
    target = final(base, step)
    if not target.exists():
        return
    doomed = base / f"{_DEL}{step}-{uuid.uuid4().hex[:8]}"
    os.rename(target, doomed)
    _fsync_dir(base)
    shutil.rmtree(doomed, ignore_errors=True)


def recover(base: Path) -> None:
    """Cleans what killed processes left in `base` (process 0, before anyone reads it): an old checkpoint
    moved aside whose replacement never arrived goes back; unfinished writes and deletions go."""
    for entry in sorted(base.iterdir()):
        name = entry.name
        if name.startswith(_OLD):
            target = base / name[len(_OLD):]
            if target.exists():
                shutil.rmtree(entry)
            else:
                os.rename(entry, target)
                ending.say(f"CheckpointManager: put back {target}, moved aside by a save of the same step that "
                           "did not finish")
        elif name.startswith(_TMP):
            ending.say(f"CheckpointManager: removing {entry}: a checkpoint left half-written by a process that "
                       "ended mid-save (never loaded)")
            shutil.rmtree(entry, ignore_errors=True)
        elif name.startswith(_DEL):
            shutil.rmtree(entry, ignore_errors=True)


def scan(base: Path) -> tuple[list[Committed], list[str]]:
    """The committed checkpoints in `base`, oldest first, and why each other step directory does not count.

    Returns:
      (committed, ignored): `ignored` holds one line per directory named like a step without a valid marker.
    """
    committed, ignored = [], []
    for entry in base.iterdir():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            step = int(entry.name)
        except ValueError:
            continue  # not one of ours
        try:
            data = json.loads((entry / MARKER).read_text())
            if data.get("format") != _FORMAT or data.get("step") != step:
                raise ValueError(f"not an xladev checkpoint marker of step {step}")
            committed.append(Committed(step, str(data["ts"]), int(data["world_size"])))
        except FileNotFoundError:
            ignored.append(f"{entry}: no {MARKER} (not a complete checkpoint)")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ignored.append(f"{entry}: unreadable {MARKER} ({exc})")
    committed.sort(key=lambda c: (c.ts, c.step))
    return committed, ignored


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)


def _fsync_dir(path: Path) -> None:
    # A rename is durable once its directory is synced.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
