"""What the SPMD tests share: a script run in a child process over 4 CPU devices, its result read back, and the
helper such scripts use to report an error as data.

Each SPMD test module runs one script (CPU_NUM_DEVICES must be set before jax starts, so not in pytest's
process) that prints `RESULT <json>` as its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def run_on_four_devices(script: Path, **env: str) -> dict:
    """Runs `script` with CPU_NUM_DEVICES=4 (and `env`) and returns the JSON of its `RESULT ` line.

    Raises:
      AssertionError: the script failed (its stderr's end is the message).
    """
    child = dict(os.environ, CPU_NUM_DEVICES="4", PYTHONPATH=str(REPO), **env)
    child.pop("XLA_FLAGS", None)
    child.pop("XLA_USE_SPMD", None)
    done = subprocess.run([sys.executable, str(script)], env=child, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def error(fn) -> list | None:
    """[exception type, message] of what `fn()` raises, None when it raises nothing (for a script's JSON)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the type and message are what is checked
        return [type(exc).__name__, str(exc)]
    return None
