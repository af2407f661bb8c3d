"""xprof's capture client, run in a child process by `xp.trace` (and so `trace_detached`, `xladev capture`).

The native client prints its progress ("Starting to trace for 2000 ms ...") on the process's standard
output and the server's real answer ("Another profiling session active") only in its C++ log on
standard error; a Python caller gets a generic "no trace event" error. In a child, both streams come
back to the parent, which reads the cause from them and prints nothing of them; the child is killed if
the capture outlives its time bound, where a thread in the caller's process could only be abandoned.

The child imports xprof's client and nothing of xladev (so the training's environment, such as
`XLADEV_EVENT_LOG`, starts nothing there). Its last line on standard error is
`xladev-capture-result: {"ok": true}` or `{"ok": false, "error": ...}`.
"""

from __future__ import annotations

import json
import subprocess
import sys

RESULT_PREFIX = "xladev-capture-result: "


def run(addr: str, logdir: str, duration_ms: int, attempts: int, options: dict, timeout_s: float) -> "Outcome":
    """Runs one capture in a child process.

    Returns:
      What happened: `.ok`, `.error` (the client's exception text), `.output` (everything it printed).

    Raises:
      subprocess.TimeoutExpired: the capture outlived `timeout_s` (the child is killed).
    """
    request = json.dumps({"addr": addr, "logdir": logdir, "duration_ms": duration_ms, "attempts": attempts,
                          "options": options})
    done = subprocess.run([sys.executable, "-c", _CHILD, request], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, errors="replace", timeout=timeout_s)
    output = done.stdout + done.stderr
    result = None
    for line in reversed(done.stderr.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                result = json.loads(line[len(RESULT_PREFIX):])
            except ValueError:
                pass
            break
    if result is None:
        tail = output.strip().splitlines()[-3:]
        return Outcome(False, f"the capture client exited with code {done.returncode} without a result"
                              + (f": {' / '.join(tail)}" if tail else ""), output)
    return Outcome(bool(result.get("ok")), str(result.get("error") or ""), output)


class Outcome:
    """A finished capture: `ok`, the client's `error` text (empty when ok), and its whole `output`."""

    __slots__ = ("ok", "error", "output")

    def __init__(self, ok: bool, error: str, output: str) -> None:
        self.ok = ok
        self.error = error
        self.output = output


# The child: one capture with xprof's client, then its result as the last line on standard error.
_CHILD = f"""
import json, sys
request = json.loads(sys.argv[1])
try:
    from xprof.convert import _pywrap_profiler_plugin
    _pywrap_profiler_plugin.trace(request["addr"], request["logdir"], "", True, int(request["duration_ms"]),
                                  int(request["attempts"]), request["options"])
    result = {{"ok": True}}
except BaseException as exc:
    result = {{"ok": False, "error": type(exc).__name__ + ": " + str(exc)}}
sys.stdout.flush()
print({RESULT_PREFIX!r} + json.dumps(result), file=sys.stderr, flush=True)
sys.exit(0 if result["ok"] else 3)
"""
