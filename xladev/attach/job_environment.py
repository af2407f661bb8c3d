"""Starting a job so that xladev attaches to the real torch_xla it imports (`xladev attach`, `xladev tui`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The folder whose sitecustomize.py installs the attach hook in the job's Python (`boot/sitecustomize.py`).
BOOT_DIR = str(Path(__file__).resolve().parent / "boot")
# The folder that holds the `xladev` package, for a job whose Python does not have xladev installed.
HOME_DIR = str(Path(__file__).resolve().parent.parent.parent)


def child_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The variables to add for a job: the boot folder first on its PYTHONPATH, and where xladev is.

    Args:
      base: the environment the job would get otherwise (its PYTHONPATH is kept, after the boot folder).

    Returns:
      PYTHONPATH and XLADEV_ATTACH_HOME.
    """
    path = [BOOT_DIR] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
    return {"PYTHONPATH": os.pathsep.join(path), "XLADEV_ATTACH_HOME": HOME_DIR}
