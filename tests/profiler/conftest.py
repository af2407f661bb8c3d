"""Fixtures of the profiler tests: free ports, child processes that are always reaped, a clean profiler state."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    """A TCP port nothing listens on (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.update(extra)
    return env


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Terminates one child by its PID, then kills it if it does not exit in time; always reaps it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(grace_s)


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout_s: float) -> str:
    """Reads the child's stdout until a line starting with `prefix` (bounded); fails with its output otherwise."""
    import selectors

    deadline = time.monotonic() + timeout_s
    seen = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith(prefix):
                return line.strip()
    finally:
        sel.close()
    raise AssertionError(f"child never printed {prefix!r} within {timeout_s} s (exit code {proc.poll()}); "
                         f"its output:\n{''.join(seen)}")


@pytest.fixture(autouse=True)
def clean_profiler_state():
    """No trace, server or step window leaks from one test into the next (or into other suites)."""
    yield
    from xladev.debug import _profiler_capture, _profiler_server, _profiler_steps

    for window in _profiler_steps.armed_windows():
        window.announce = False
        window.cancel()
    if _profiler_capture.active_session() is not None:
        try:
            _profiler_capture.stop_trace()
        except Exception:
            pass
    _profiler_server.stop_server()


def run_python(code: str, env: dict, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout_s,
                          cwd=ROOT)
